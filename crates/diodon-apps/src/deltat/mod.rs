//! Delta-t applications (they need a return path): [`driver`] runs the
//! sans-IO endpoint on a UDP socket and offers a socket-like API
//! (`DeltatListener`, `DeltatStream`); [`transfer`] is what `diodon deltat`
//! does with it — one verified file each way of a verdict, and the thesis's
//! echo — over Delta-t or, for comparison, Linux TCP with the same framing.

pub mod driver;
pub mod transfer;

pub use driver::{DeltatListener, DeltatStream, SocketCounters, DEFAULT_PORT};

//! Diodon's pre-filter for mirrored traffic, sans-IO: it reads no socket,
//! no clock and no thread. Frames go in as byte slices; verdicts, agent
//! numbers and records come out.
//!
//! ```text
//!  captured frame ─► frame::Headers::parse ─► classify::Classifier (rules::RuleSet compiled)
//!                         │                        │ allow / deny + which rule
//!                         ▼                        ▼
//!                  flow::FlowKey (symmetric) ─► flow::Rendezvous ─► agent index
//!                                                   │
//!                      wire: encapsulate (0xF1F0) ◄─┴─► wire: packet record (across the diode)
//! ```
//!
//! Modules: [`frame`] (borrowed views: Ethernet, VLAN/QinQ, IPv4, IPv6 with
//! extension headers and fragments, ports), [`rules`] (the ACL language,
//! its parser and its meaning), [`classify`] (the compiled classifier),
//! [`flow`] (symmetric flow keys, the hash, rendezvous hashing), [`wire`]
//! (encapsulation header, packet records), [`synth`] (frames made to order
//! for tests and trace generators).
#![forbid(unsafe_code)]

pub mod classify;
pub mod flow;
pub mod frame;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod rules;
pub mod synth;
pub mod wire;

pub use classify::{Classifier, Verdict};
pub use flow::{FlowKey, FlowMode, Rendezvous};
pub use frame::{Headers, Mac, L3};
pub use rules::{Action, RuleError, RuleSet};

//! Diodon's one-way protocol core, sans-IO: it never reads a clock, a socket
//! or a thread. Datagrams and `now` go in through `handle_*`; datagrams,
//! timers and events come out through `poll_*`.
//!
//! ```text
//!   application bytes                                   application bytes
//!         │                                                     ▲
//!   ┌─────▼──────┐  datagrams (wire.rs)   ┌──────────────┐      │
//!   │  Sender    │ ─────── one way ──────►│  Receiver    │──────┘
//!   │ fec, pacer │                        │ fec, timers  │ events, stats
//!   └────────────┘                        └──────────────┘
//! ```
//!
//! Time, timer tables and the transmit contract come from `diodon-sansio`
//! (shared with Delta-t and the drivers). Modules: [`types`] (checked
//! parameters), [`wire`] (datagram views and representations), [`crypto`]
//! (keys, the keyed MAC, per-session ChaCha20-Poly1305), [`fec`]
//! (erasure code trait and Reed–Solomon), [`block_coding`] (full blocks
//! encoded by the thread that read them), [`fec_plan`] (the loss model that
//! sizes repair), [`pacer`] (token bucket), [`sender`] and [`receiver`] (the
//! session state machines), [`records`] (the record framing of datagram
//! channels, aligned to blocks for packets), [`kafka_record`] (the framing
//! of Kafka records in a topic-partition's channel), [`blocks`] (the set of a sync
//! channel's blocks the application holds, merged across passes).
#![forbid(unsafe_code)]

pub mod block_coding;
pub mod blocks;
pub mod bundle;
pub mod crypto;
pub mod fec;
pub mod fec_plan;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod kafka_record;
pub mod pacer;
pub mod pool;
pub mod receiver;
pub mod records;
pub mod sender;
pub mod types;
pub mod wire;

pub use block_coding::{BlockCoding, FullBlock};
pub use blocks::{BlockSet, BlockSetError};
pub use crypto::{KeyRing, KeyRingError, Secret};
pub use diodon_sansio::{Deadlines, IpVersion, TimerSlot, TimerTable, Timestamp, Transmit};
pub use receiver::{
    Event, FailReason, HoldError, Mismatch, Receiver, ReceiverConfig, ReceiverStats, Rejection,
};
pub use records::{BlockRecords, RecordError};
pub use sender::{SendError, Sender, SenderConfig, SenderEvent, SenderStats};
pub use types::{ChannelId, ConfigError, Rate, RepairRatio, SessionId, SymbolSize};
pub use wire::{ChannelKind, ChannelMeta, Integrity, SyncInfo, WireError};

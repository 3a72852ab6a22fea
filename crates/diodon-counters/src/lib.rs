//! Counters declared once. Every stats struct of Diodon (the one-way sender
//! and receiver, the Delta-t endpoint, the kernel's UDP MIB and link
//! statistics, the batched sockets, the UDP-flow source and sink) is written
//! with [`counters!`]: one line per counter gives its field, its metric name,
//! its kind, its unit and its help text. Everything that shows counters is a
//! subscriber of that one declaration through [`CounterSet::for_each`]:
//!
//! ```text
//!   counters! { struct ReceiverStats in "receiver" { … } }   (the declaration)
//!        │ CounterSet::for_each(&mut |desc, value| …)
//!        ├──► prometheus::render   HELP/TYPE/sample lines, names by convention
//!        ├──► Snapshot (serde)     {"field": value, …} in the JSON summaries,
//!        │                         and back: from_snapshot() (the lab reads a summary typed)
//!        ├──► columns()            CSV headers and cells of the trial harness
//!        └──► delta()              what changed between two snapshots (typed or as a map)
//! ```
//!
//! Metric names follow the Prometheus conventions: `PREFIX_SUBSYSTEM_NAME`,
//! the base unit before `_total` for counters (`diodon_receiver_delivered_bytes_total`).
//! Diodon's own counters use the prefix `diodon`; counters the kernel keeps
//! use `kernel` (they are not Diodon's, and several processes see the same).

#![forbid(unsafe_code)]

pub mod prometheus;

use std::collections::BTreeMap;

/// Whether a value only grows (counter) or goes up and down (gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic count since start; the name ends in `_total`.
    Counter,
    /// A current level.
    Gauge,
}

/// What one unit of the value is. Base units (bytes, seconds) become part of
/// the metric name; counts of things are already named by the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes.
    Bytes,
    /// Seconds.
    Seconds,
    /// A count of datagrams, packets, symbols, blocks, channels, events …
    /// (the noun is in the name).
    Count,
}

impl Unit {
    /// The suffix Prometheus expects before `_total`, if any.
    pub fn suffix(self) -> Option<&'static str> {
        match self {
            Unit::Bytes => Some("bytes"),
            Unit::Seconds => Some("seconds"),
            Unit::Count => None,
        }
    }
}

/// One counter's declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desc {
    /// The struct field (and JSON key).
    pub field: &'static str,
    /// The metric name without prefix, subsystem, unit or `_total`
    /// (`delivered` for `diodon_receiver_delivered_bytes_total`).
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Unit of the value.
    pub unit: Unit,
    /// One sentence for humans (Prometheus `# HELP`, `diodon stats`).
    pub help: &'static str,
}

impl Desc {
    /// The full metric name, e.g. `diodon_receiver_delivered_bytes_total`.
    pub fn metric(&self, prefix: &str, subsystem: &str) -> String {
        let mut s = String::with_capacity(64);
        for part in [prefix, subsystem, self.name] {
            if !part.is_empty() {
                if !s.is_empty() {
                    s.push('_');
                }
                s.push_str(part);
            }
        }
        if let Some(u) = self.unit.suffix() {
            if !self.name.ends_with(u) {
                s.push('_');
                s.push_str(u);
            }
        }
        if self.kind == Kind::Counter {
            s.push_str("_total");
        }
        s
    }
}

/// Who owns a set of counters, for the metric name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Counted by Diodon itself (prefix `diodon`).
    Diodon,
    /// Counted by the kernel (prefix `kernel`).
    Kernel,
}

impl Owner {
    /// The metric-name prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Owner::Diodon => "diodon",
            Owner::Kernel => "kernel",
        }
    }
}

/// A struct whose counters were declared with [`counters!`].
pub trait CounterSet {
    /// Who counts them.
    const OWNER: Owner;
    /// The subsystem part of the metric names (`receiver`, `udp`, `link`).
    const SUBSYSTEM: &'static str;
    /// Every declaration, in declaration order.
    const DESCS: &'static [Desc];
    /// Calls `f` with each declaration and its current value, in order.
    fn for_each(&self, f: &mut dyn FnMut(&'static Desc, u64));
    /// `self - earlier`, field by field, saturating at 0 (a counter that was
    /// reset or wrapped reads 0, never a huge number); the typed twin of
    /// [`Snapshot::delta`].
    #[must_use]
    fn delta(&self, earlier: &Self) -> Self
    where
        Self: Sized;
    /// The set back from its [`Snapshot`] (a JSON summary read back):
    /// fields the snapshot lacks read 0, keys the set does not declare are
    /// ignored. With `snapshot` this makes the typed set and the map two
    /// views of one declaration.
    fn from_snapshot(values: &Snapshot) -> Self
    where
        Self: Sized;
    /// A plain map `field → value` (for JSON, CSV and deltas).
    fn snapshot(&self) -> Snapshot {
        let mut values = BTreeMap::new();
        self.for_each(&mut |d, v| {
            values.insert(d.field.to_owned(), v);
        });
        Snapshot(values)
    }
}

/// Counter values by field name: what the JSON summaries carry and the lab
/// reads back. Serialises as a flat JSON object.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Snapshot(pub BTreeMap<String, u64>);

impl Snapshot {
    /// One value (0 when absent: a counter that never moved, or an older peer).
    pub fn get(&self, field: &str) -> u64 {
        self.0.get(field).copied().unwrap_or(0)
    }

    /// `self - earlier`, field by field, saturating at 0 (a counter reset).
    #[must_use]
    pub fn delta(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(earlier.get(k))))
                .collect(),
        )
    }

    /// Adds every value of `more` to this one's, field by field (the
    /// counters of several links as one).
    pub fn add(&mut self, more: &Snapshot) {
        for (k, v) in &more.0 {
            let total = self.0.entry(k.clone()).or_default();
            *total = total.saturating_add(*v);
        }
    }
}

/// The CSV column names of a counter set, `SUBSYSTEM_FIELD`, in declaration order.
pub fn columns<C: CounterSet>() -> impl Iterator<Item = String> {
    C::DESCS
        .iter()
        .map(|d| format!("{}_{}", C::SUBSYSTEM, d.field))
}

/// Declares a stats struct of `u64` counters together with, for each, its
/// metric name, kind, unit and help; implements [`CounterSet`] for it. The
/// help text becomes the field's doc comment.
///
/// ```
/// diodon_counters::counters! {
///     /// Counters of a demo.
///     #[derive(Debug, Clone, Default)]
///     pub struct Demo in Diodon "demo" {
///         /// Extra doc lines are allowed.
///         bytes_in: counter Bytes "received" "Bytes received.",
///         queue: gauge Count "queue_length" "Entries queued now.",
///     }
/// }
/// use diodon_counters::CounterSet;
/// let d = Demo { bytes_in: 3, queue: 1 };
/// assert_eq!(Demo::DESCS[0].metric("diodon", Demo::SUBSYSTEM), "diodon_demo_received_bytes_total");
/// assert_eq!(d.snapshot().get("bytes_in"), 3);
/// ```
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident in $owner:ident $subsystem:literal {
            $(
                $(#[doc = $doc:literal])*
                $field:ident : $kind:ident $unit:ident $metric:literal $help:literal
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        // The help text is written for Prometheus and operators, not rustdoc;
        // `allow`, not `expect`: most declarations do not trigger it.
        #[allow(clippy::doc_markdown)]
        $vis struct $name {
            $(
                #[doc = $help]
                $(#[doc = $doc])*
                pub $field: u64,
            )*
        }

        impl $crate::CounterSet for $name {
            const OWNER: $crate::Owner = $crate::Owner::$owner;
            const SUBSYSTEM: &'static str = $subsystem;
            const DESCS: &'static [$crate::Desc] = &[
                $(
                    $crate::Desc {
                        field: stringify!($field),
                        name: $metric,
                        kind: $crate::counters!(@kind $kind),
                        unit: $crate::Unit::$unit,
                        help: $help,
                    },
                )*
            ];
            fn for_each(&self, f: &mut dyn FnMut(&'static $crate::Desc, u64)) {
                let mut descs = <Self as $crate::CounterSet>::DESCS.iter();
                $(
                    if let Some(d) = descs.next() {
                        f(d, self.$field);
                    }
                )*
            }
            fn delta(&self, earlier: &Self) -> Self {
                $name {
                    $( $field: self.$field.saturating_sub(earlier.$field), )*
                }
            }
            fn from_snapshot(values: &$crate::Snapshot) -> Self {
                $name {
                    $( $field: values.get(stringify!($field)), )*
                }
            }
        }
    };
    (@kind counter) => { $crate::Kind::Counter };
    (@kind gauge) => { $crate::Kind::Gauge };
}

#[cfg(test)]
mod tests {
    use super::*;

    counters! {
        /// A test set.
        #[derive(Debug, Clone, Default)]
        pub struct T in Kernel "udp" {
            in_datagrams: counter Count "in_datagrams" "InDatagrams: delivered to sockets.",
            delivered: counter Bytes "delivered" "Bytes delivered.",
            level: gauge Count "queue" "Entries queued.",
            rx_bytes: counter Bytes "rx_bytes" "Already ends in the unit.",
        }
    }

    #[test]
    fn names_follow_prometheus_conventions() {
        let names: Vec<String> = T::DESCS
            .iter()
            .map(|d| d.metric(T::OWNER.prefix(), T::SUBSYSTEM))
            .collect();
        assert_eq!(
            names,
            [
                "kernel_udp_in_datagrams_total",
                "kernel_udp_delivered_bytes_total",
                "kernel_udp_queue",
                "kernel_udp_rx_bytes_total",
            ]
        );
    }

    #[test]
    fn snapshots_add_up_field_by_field() {
        let one = |pairs: &[(&str, u64)]| {
            Snapshot(pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect())
        };
        let mut total = one(&[("a", 1), ("b", 2)]);
        total.add(&one(&[("b", 3), ("c", u64::MAX)]));
        total.add(&one(&[("c", 1)]));
        assert_eq!(total, one(&[("a", 1), ("b", 5), ("c", u64::MAX)]));
    }

    #[test]
    fn snapshot_visits_every_field_in_order() {
        let t = T {
            in_datagrams: 1,
            delivered: 2,
            level: 3,
            rx_bytes: 4,
        };
        let mut seen = Vec::new();
        t.for_each(&mut |d, v| seen.push((d.field, v)));
        assert_eq!(
            seen,
            [
                ("in_datagrams", 1),
                ("delivered", 2),
                ("level", 3),
                ("rx_bytes", 4)
            ]
        );
        let later = T {
            in_datagrams: 5,
            delivered: 1,
            ..t.clone()
        };
        let d = later.snapshot().delta(&t.snapshot());
        assert_eq!(d.get("in_datagrams"), 4);
        assert_eq!(d.get("delivered"), 0, "a reset saturates");
        assert_eq!(later.delta(&t).snapshot(), d, "typed and map deltas agree");
        let back = T::from_snapshot(&later.snapshot());
        assert_eq!(back.snapshot(), later.snapshot(), "a snapshot reads back");
        let mut partial = Snapshot::default();
        partial.0.insert("level".into(), 9);
        partial.0.insert("undeclared".into(), 1);
        assert_eq!(T::from_snapshot(&partial).level, 9);
        assert_eq!(T::from_snapshot(&partial).delivered, 0);
        assert_eq!(
            serde_json::to_string(&t.snapshot()).unwrap(),
            r#"{"delivered":2,"in_datagrams":1,"level":3,"rx_bytes":4}"#
        );
        assert_eq!(
            columns::<T>().collect::<Vec<_>>(),
            [
                "udp_in_datagrams",
                "udp_delivered",
                "udp_level",
                "udp_rx_bytes"
            ]
        );
    }
}

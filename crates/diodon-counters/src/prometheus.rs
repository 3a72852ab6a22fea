//! Prometheus text exposition (format 0.0.4) of counter sets: a subscriber
//! of the declarations in [`crate::counters!`].
//!
//! ```text
//!  Page::add(&stats, labels) ─► families (one per metric name, first-seen order)
//!                                 └─ samples (one per label set)
//!  Page::render() ─► "# HELP …\n# TYPE …\nname{labels} value\n" per family
//! ```
//!
//! Samples of one family stay together however many label sets are added
//! (the format requires it), so per-interface sets can be added one by one.

use crate::{CounterSet, Kind};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The content type of a rendered page.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    kind: Kind,
    samples: Vec<(String, u64)>,
}

/// One page of metrics being assembled.
#[derive(Debug, Default)]
pub struct Page {
    families: Vec<Family>,
    index: HashMap<String, usize>,
}

impl Page {
    /// An empty page.
    pub fn new() -> Self {
        Page::default()
    }

    /// Adds every counter of `set`, each sample carrying `labels`.
    pub fn add<C: CounterSet>(&mut self, set: &C, labels: &[(&str, &str)]) {
        self.add_as(set, C::SUBSYSTEM, labels);
    }

    /// Like [`Page::add`] under another subsystem name: one declaration
    /// serving several places (the IPv6 UDP MIB as `udp6`, a socket counter
    /// set as `udp_source_socket`).
    pub fn add_as<C: CounterSet>(&mut self, set: &C, subsystem: &str, labels: &[(&str, &str)]) {
        let labels = format_labels(labels);
        set.for_each(&mut |d, v| {
            let name = d.metric(C::OWNER.prefix(), subsystem);
            self.sample(name, d.help, d.kind, labels.clone(), v);
        });
    }

    /// Adds one gauge that is not part of a counter set (e.g. which interface
    /// carries the link).
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: u64) {
        self.sample(
            name.to_owned(),
            help,
            Kind::Gauge,
            format_labels(labels),
            value,
        );
    }

    fn sample(&mut self, name: String, help: &str, kind: Kind, labels: String, value: u64) {
        let next = self.families.len();
        let i = *self.index.entry(name.clone()).or_insert(next);
        if i == next {
            self.families.push(Family {
                name,
                help: help.to_owned(),
                kind,
                samples: Vec::new(),
            });
        }
        self.families[i].samples.push((labels, value));
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(self.families.len() * 160);
        for f in &self.families {
            let kind = match f.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let _ = writeln!(o, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(o, "# TYPE {} {kind}", f.name);
            for (labels, v) in &f.samples {
                let _ = writeln!(o, "{}{labels} {v}", f.name);
            }
        }
        o
    }
}

fn format_labels(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let mut s = String::from("{");
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{k}=\"");
        for c in v.chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                '"' => s.push_str("\\\""),
                '\n' => s.push_str("\\n"),
                c => s.push(c),
            }
        }
        s.push('"');
    }
    s.push('}');
    s
}

fn escape_help(h: &str) -> String {
    h.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Parses the unlabelled and labelled integer samples of a page back into
/// `(name with labels, value)`; for tests (readers of a running Diodon use
/// its typed `/counters` page instead).
pub fn parse(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, v) = l.rsplit_once(' ')?;
            Some((name.to_owned(), v.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::counters! {
        #[derive(Debug, Default)]
        struct Link in Kernel "link" {
            rx_packets: counter Count "rx_packets" "Packets received.",
            rx_bytes: counter Bytes "rx_bytes" "Bytes received.",
        }
    }

    #[test]
    fn families_stay_together_across_label_sets() {
        let mut p = Page::new();
        p.add(
            &Link {
                rx_packets: 1,
                rx_bytes: 2,
            },
            &[("interface", "lo")],
        );
        p.add(
            &Link {
                rx_packets: 3,
                rx_bytes: 4,
            },
            &[("interface", "a\"b")],
        );
        p.gauge(
            "diodon_interface_in_use",
            "The interface.",
            &[("interface", "lo")],
            1,
        );
        let text = p.render();
        assert_eq!(
            text,
            "# HELP kernel_link_rx_packets_total Packets received.\n\
             # TYPE kernel_link_rx_packets_total counter\n\
             kernel_link_rx_packets_total{interface=\"lo\"} 1\n\
             kernel_link_rx_packets_total{interface=\"a\\\"b\"} 3\n\
             # HELP kernel_link_rx_bytes_total Bytes received.\n\
             # TYPE kernel_link_rx_bytes_total counter\n\
             kernel_link_rx_bytes_total{interface=\"lo\"} 2\n\
             kernel_link_rx_bytes_total{interface=\"a\\\"b\"} 4\n\
             # HELP diodon_interface_in_use The interface.\n\
             # TYPE diodon_interface_in_use gauge\n\
             diodon_interface_in_use{interface=\"lo\"} 1\n"
        );
        let samples = parse(&text);
        assert_eq!(samples.len(), 5);
        assert_eq!(
            samples[0],
            ("kernel_link_rx_packets_total{interface=\"lo\"}".into(), 1)
        );
    }
}

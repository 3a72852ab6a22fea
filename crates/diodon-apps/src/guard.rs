//! The one-way guard: an nftables `netdev` table on the diode interface of
//! one host, the `dd_udp.c` equivalent (thesis §5.2) without a kernel module.
//!
//! ```text
//!  sender host (role sender)                  receiver host (role receiver)
//!  app ─► IF egress: only UDP SRC→PEER:PORT   IF ingress: only UDP SRC→PEER:PORT ─► app
//!           counter "accepted" (pkts, bytes)    counter "accepted" (pkts, bytes)
//!           else counter "dropped_out", drop    else counter "dropped_in", drop
//!           (priority +10)                      (priority +10)
//!         IF ingress: counter "dropped_in", drop IF egress: counter "dropped_out", drop
//!           (priority −10)                      (priority −10)
//! ```
//!
//! Both chains have policy `drop`, so deleting a rule by hand never opens
//! the path. [`verify`] compares the live `nft -j list table` with the model
//! generated here (chains, hooks, priorities, policies, devices, every rule's
//! expressions and the named counters) and names the first difference.
//!
//! The counters count what the hook sees: with UDP GSO a super-packet of up
//! to 64 segments passes the egress hook once, so exact datagram counts need
//! GSO off on the sender (`diodon send --no-gso`).
//!
//! Production code: a gateway loads it with `diodon guard apply`; the trial
//! harness (diodon-lab) loads its own table through the same functions and
//! reads [`counters`] as its `dtgrms_*` measuring points. `nft` runs through
//! [`crate::nft`].

use crate::nft::{nft, ToolError};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

/// The default table name (the testbed's own table is `diodon_guard`).
pub const DEFAULT_TABLE: &str = "diodon_diode";
/// Hook priority of the allowing chain: after the testbed's priority-0 loss
/// emulation, so the receiver's `accepted` counts what came off the link.
pub const PRIORITY_ALLOW: i32 = 10;
/// Hook priority of the denying chain: before anything else on the hook, so
/// every packet in the forbidden direction is counted here.
pub const PRIORITY_DENY: i32 = -10;

fn priority(allow: bool) -> i32 {
    if allow {
        PRIORITY_ALLOW
    } else {
        PRIORITY_DENY
    }
}
/// Counter: datagrams (and bytes) let through.
pub const ACCEPTED: &str = "accepted";
/// Counter: non-first IPv4 fragments of the allowed flow let through (tools
/// like netcat and pydiode send datagrams larger than the MTU; Diodon never does).
pub const FRAGMENTS: &str = "fragments";
/// Counter: everything arriving that policy dropped.
pub const DROPPED_IN: &str = "dropped_in";
/// Counter: everything leaving that policy dropped.
pub const DROPPED_OUT: &str = "dropped_out";

/// Errors of the guard commands.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// `nft` or `ip` failed.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The live ruleset differs from the expected one.
    #[error("guard {table} in {ns}: {reason}")]
    Mismatch {
        /// Namespace (or "this namespace").
        ns: String,
        /// Table.
        table: String,
        /// The first difference found.
        reason: String,
    },
    /// `nft -j` printed something unexpected.
    #[error("cannot parse nft JSON: {0}")]
    Json(String),
    /// A bad name or address combination.
    #[error("invalid guard settings: {0}")]
    Invalid(String),
}

/// Which end of the diode the host is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Sends; nothing may come in.
    Sender,
    /// Receives; nothing may go out.
    Receiver,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Sender => "sender",
            Role::Receiver => "receiver",
        })
    }
}

/// Where and what the guard enforces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardSpec {
    /// Network namespace (`ip netns` name); `None`: the caller's.
    pub ns: Option<String>,
    /// The diode interface.
    pub iface: String,
    /// Sender or receiver.
    pub role: Role,
    /// The receiver's address and port.
    pub peer: SocketAddr,
    /// The sender's address (any when `None`).
    pub source: Option<IpAddr>,
    /// Table name.
    pub table: String,
}

impl GuardSpec {
    /// Checks names (they end up in a ruleset) and address families.
    pub fn new(
        ns: Option<String>,
        iface: &str,
        role: Role,
        peer: SocketAddr,
        source: Option<IpAddr>,
        table: &str,
    ) -> Result<Self, GuardError> {
        let ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        };
        if !ok(iface) || iface.len() > 15 {
            return Err(GuardError::Invalid(format!("interface name {iface:?}")));
        }
        if !ok(table) {
            return Err(GuardError::Invalid(format!("table name {table:?}")));
        }
        if let Some(src) = source {
            if src.is_ipv4() != peer.is_ipv4() {
                return Err(GuardError::Invalid(format!(
                    "--source {src} and --peer {peer} are of different families"
                )));
            }
        }
        Ok(GuardSpec {
            ns,
            iface: iface.to_owned(),
            role,
            peer,
            source,
            table: table.to_owned(),
        })
    }

    fn ns(&self) -> Option<&str> {
        self.ns.as_deref()
    }

    fn where_(&self) -> String {
        self.ns
            .clone()
            .unwrap_or_else(|| "this namespace".to_owned())
    }

    fn proto(&self) -> &'static str {
        if self.peer.is_ipv4() {
            "ip"
        } else {
            "ip6"
        }
    }

    /// `ip saddr S ip daddr D udp dport P` as ruleset text.
    fn allow_match(&self) -> String {
        let p = self.proto();
        let src = self
            .source
            .map(|s| format!("{p} saddr {s} "))
            .unwrap_or_default();
        format!(
            "{src}{p} daddr {} udp dport {}",
            self.peer.ip(),
            self.peer.port()
        )
    }

    /// Non-first IPv4 fragments from the source to the peer (their first
    /// fragment carries the UDP header the port was checked on).
    fn fragment_match(&self) -> Option<String> {
        let IpAddr::V4(peer) = self.peer.ip() else {
            return None;
        };
        let src = self
            .source
            .map(|s| format!("ip saddr {s} "))
            .unwrap_or_default();
        Some(format!(
            "{src}ip daddr {peer} ip protocol udp ip frag-off & 0x1fff != 0"
        ))
    }

    /// (chain name, hook, allowing chain?) for both chains.
    fn chains(&self) -> [(&'static str, bool); 2] {
        match self.role {
            Role::Sender => [("egress", true), ("ingress", false)],
            Role::Receiver => [("ingress", true), ("egress", false)],
        }
    }

    fn drop_counter(chain: &str) -> &'static str {
        if chain == "ingress" {
            DROPPED_IN
        } else {
            DROPPED_OUT
        }
    }

    /// The ruleset text `apply` loads with `nft -f -` (replaces the table atomically).
    pub fn ruleset(&self) -> String {
        let t = &self.table;
        let mut s = format!(
            "table netdev {t}\ndelete table netdev {t}\ntable netdev {t} {{\n    counter {ACCEPTED} {{}}\n    counter {FRAGMENTS} {{}}\n    counter {DROPPED_IN} {{}}\n    counter {DROPPED_OUT} {{}}\n"
        );
        for (chain, allow) in self.chains() {
            let _ = write!(
                s,
                "    chain {chain} {{\n        type filter hook {chain} device \"{}\" priority {}; policy drop;\n",
                self.iface,
                priority(allow)
            );
            if allow {
                let _ = writeln!(
                    s,
                    "        {} counter name \"{ACCEPTED}\" accept",
                    self.allow_match()
                );
                if let Some(m) = self.fragment_match() {
                    let _ = writeln!(s, "        {m} counter name \"{FRAGMENTS}\" accept");
                }
            }
            let _ = write!(
                s,
                "        counter name \"{}\" drop\n    }}\n",
                Self::drop_counter(chain)
            );
        }
        s.push_str("}\n");
        s
    }

    /// The rules of each chain as `nft -j` prints their `expr` arrays.
    fn expected_rules(&self, chain: &str, allow: bool) -> Vec<Value> {
        let mut rules = Vec::new();
        if allow {
            let p = self.proto();
            let field = |proto: &str, field: &str, right: Value| json!({"match": {"op": "==", "left": {"payload": {"protocol": proto, "field": field}}, "right": right}});
            let mut expr = Vec::new();
            if let Some(src) = self.source {
                expr.push(field(p, "saddr", json!(src.to_string())));
            }
            expr.push(field(p, "daddr", json!(self.peer.ip().to_string())));
            expr.push(field("udp", "dport", json!(self.peer.port())));
            expr.push(json!({"counter": ACCEPTED}));
            expr.push(json!({"accept": null}));
            rules.push(Value::Array(expr));
            if self.peer.is_ipv4() {
                let mut expr = Vec::new();
                if let Some(src) = self.source {
                    expr.push(field("ip", "saddr", json!(src.to_string())));
                }
                expr.push(field("ip", "daddr", json!(self.peer.ip().to_string())));
                expr.push(field("ip", "protocol", json!("udp")));
                expr.push(json!({"match": {"op": "!=", "left": {"&": [{"payload": {"protocol": "ip", "field": "frag-off"}}, 8191]}, "right": 0}}));
                expr.push(json!({"counter": FRAGMENTS}));
                expr.push(json!({"accept": null}));
                rules.push(Value::Array(expr));
            }
        }
        rules.push(json!([{"counter": Self::drop_counter(chain)}, {"drop": null}]));
        rules
    }
}

/// Loads (or replaces) the guard table.
pub fn apply(spec: &GuardSpec) -> Result<(), GuardError> {
    nft(spec.ns(), &["-f", "-"], Some(&spec.ruleset()))?;
    Ok(())
}

/// Deletes the guard table (fine if it is already gone).
pub fn remove(spec_ns: Option<&str>, table: &str) -> Result<(), GuardError> {
    let text = format!("table netdev {table}\ndelete table netdev {table}\n");
    nft(spec_ns, &["-f", "-"], Some(&text))?;
    Ok(())
}

/// One named counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

impl Count {
    /// `self − earlier`, saturating.
    #[must_use]
    pub fn delta(&self, earlier: &Count) -> Count {
        Count {
            packets: self.packets.saturating_sub(earlier.packets),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// The guard's named counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GuardCounters {
    /// Datagrams/bytes let through (first fragments count as datagrams).
    pub accepted: Count,
    /// Non-first fragments let through.
    pub fragments: Count,
    /// Dropped arriving.
    pub dropped_in: Count,
    /// Dropped leaving.
    pub dropped_out: Count,
}

impl GuardCounters {
    /// Parses `nft -j list counters table netdev T`.
    pub fn parse(json_text: &str) -> Result<Self, GuardError> {
        let mut out = GuardCounters::default();
        for obj in nft_objects(json_text)? {
            let Some(c) = obj.get("counter") else {
                continue;
            };
            let count = Count {
                packets: c["packets"].as_u64().unwrap_or(0),
                bytes: c["bytes"].as_u64().unwrap_or(0),
            };
            match c["name"].as_str() {
                Some(ACCEPTED) => out.accepted = count,
                Some(FRAGMENTS) => out.fragments = count,
                Some(DROPPED_IN) => out.dropped_in = count,
                Some(DROPPED_OUT) => out.dropped_out = count,
                _ => {}
            }
        }
        Ok(out)
    }

    /// `self − earlier`.
    #[must_use]
    pub fn delta(&self, earlier: &GuardCounters) -> GuardCounters {
        GuardCounters {
            accepted: self.accepted.delta(&earlier.accepted),
            fragments: self.fragments.delta(&earlier.fragments),
            dropped_in: self.dropped_in.delta(&earlier.dropped_in),
            dropped_out: self.dropped_out.delta(&earlier.dropped_out),
        }
    }
}

/// Reads the guard's counters in `ns`.
pub fn counters(ns: Option<&str>, table: &str) -> Result<GuardCounters, GuardError> {
    let text = nft(
        ns,
        &["-j", "list", "counters", "table", "netdev", table],
        None,
    )?;
    GuardCounters::parse(&text)
}

/// Resets the guard's counters in `ns` (the thesis's `NL_CMD_RESET_COUNTERS`).
pub fn reset(ns: Option<&str>, table: &str) -> Result<(), GuardError> {
    nft(ns, &["reset", "counters", "table", "netdev", table], None)?;
    Ok(())
}

fn nft_objects(json_text: &str) -> Result<Vec<Value>, GuardError> {
    let v: Value = serde_json::from_str(json_text).map_err(|e| GuardError::Json(e.to_string()))?;
    match v.get("nftables") {
        Some(Value::Array(a)) => Ok(a.clone()),
        _ => Err(GuardError::Json("no `nftables` array".into())),
    }
}

/// The live table as `nft -j list table` shows it (handles dropped).
#[derive(Debug, Default)]
struct LiveTable {
    counters: Vec<String>,
    chains: BTreeMap<String, Value>,
    rules: BTreeMap<String, Vec<Value>>,
    other: Vec<String>,
}

fn parse_live(json_text: &str) -> Result<LiveTable, GuardError> {
    let mut t = LiveTable::default();
    for obj in nft_objects(json_text)? {
        let Some((kind, body)) = obj.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        match kind.as_str() {
            "metainfo" | "table" => {}
            "counter" => t
                .counters
                .push(body["name"].as_str().unwrap_or_default().to_owned()),
            "chain" => {
                let name = body["name"].as_str().unwrap_or_default().to_owned();
                t.rules.entry(name.clone()).or_default();
                t.chains.insert(name, body.clone());
            }
            "rule" => {
                let chain = body["chain"].as_str().unwrap_or_default().to_owned();
                t.rules
                    .entry(chain)
                    .or_default()
                    .push(body.get("expr").cloned().unwrap_or(Value::Null));
            }
            other => t.other.push(format!(
                "{other} {}",
                body["name"].as_str().unwrap_or_default()
            )),
        }
    }
    Ok(t)
}

/// Checks the live table against `spec`; `Ok` only when identical (counter
/// values aside).
pub fn verify(spec: &GuardSpec) -> Result<(), GuardError> {
    let mismatch = |reason: String| GuardError::Mismatch {
        ns: spec.where_(),
        table: spec.table.clone(),
        reason,
    };
    let text = match nft(
        spec.ns(),
        &["-j", "list", "table", "netdev", &spec.table],
        None,
    ) {
        Ok(t) => t,
        Err(ToolError::Failed { stderr, .. }) => {
            return Err(mismatch(format!(
                "table netdev {} is missing ({stderr})",
                spec.table
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let live = parse_live(&text)?;
    let devices = nft(spec.ns(), &["list", "table", "netdev", &spec.table], None)?;
    compare(spec, &live, &devices).map_err(mismatch)
}

fn compare(spec: &GuardSpec, live: &LiveTable, text: &str) -> Result<(), String> {
    let mut want_counters = vec![ACCEPTED, FRAGMENTS, DROPPED_IN, DROPPED_OUT];
    want_counters.sort_unstable();
    let mut have: Vec<&str> = live.counters.iter().map(String::as_str).collect();
    have.sort_unstable();
    if have != want_counters {
        return Err(format!(
            "named counters are {have:?}, expected {want_counters:?}"
        ));
    }
    if let Some(o) = live.other.first() {
        return Err(format!("unexpected object in the table: {o}"));
    }
    let chains = spec.chains();
    for extra in live.chains.keys() {
        if !chains.iter().any(|(c, _)| c == extra) {
            return Err(format!("unexpected chain {extra:?}"));
        }
    }
    for (chain, allow) in chains {
        let Some(c) = live.chains.get(chain) else {
            return Err(format!("chain {chain:?} is missing"));
        };
        for (key, want) in [
            ("type", json!("filter")),
            ("hook", json!(chain)),
            ("prio", json!(priority(allow))),
            ("policy", json!("drop")),
        ] {
            if c.get(key) != Some(&want) {
                return Err(format!(
                    "chain {chain:?}: {key} is {}, expected {want}",
                    c.get(key).unwrap_or(&Value::Null)
                ));
            }
        }
        let hook_line = format!("hook {chain} device \"{}\"", spec.iface);
        let hook_line_bare = format!("hook {chain} device {} ", spec.iface);
        if !text.contains(&hook_line) && !text.contains(&hook_line_bare) {
            return Err(format!(
                "chain {chain:?} is not attached to device {:?}",
                spec.iface
            ));
        }
        let want = spec.expected_rules(chain, allow);
        let have = live.rules.get(chain).cloned().unwrap_or_default();
        for (i, w) in want.iter().enumerate() {
            match have.get(i) {
                None => {
                    return Err(format!(
                        "chain {chain:?}: rule {} is missing (expected {w})",
                        i + 1
                    ))
                }
                Some(h) if h != w => {
                    return Err(format!(
                        "chain {chain:?}: rule {} is {h}, expected {w}",
                        i + 1
                    ))
                }
                Some(_) => {}
            }
        }
        if let Some(extra) = have.get(want.len()) {
            return Err(format!(
                "chain {chain:?}: unexpected extra rule {}: {extra}",
                want.len() + 1
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(role: Role, source: bool) -> GuardSpec {
        GuardSpec::new(
            Some("x-rx".into()),
            "rx0",
            role,
            "10.77.0.2:7700".parse().expect("test"),
            source.then(|| "10.77.0.1".parse().expect("test")),
            DEFAULT_TABLE,
        )
        .expect("test")
    }

    #[test]
    fn receiver_ruleset_allows_in_drops_out() {
        let r = spec(Role::Receiver, true).ruleset();
        assert!(r.contains("chain ingress {\n        type filter hook ingress device \"rx0\" priority 10; policy drop;\n        ip saddr 10.77.0.1 ip daddr 10.77.0.2 udp dport 7700 counter name \"accepted\" accept\n        ip saddr 10.77.0.1 ip daddr 10.77.0.2 ip protocol udp ip frag-off & 0x1fff != 0 counter name \"fragments\" accept\n        counter name \"dropped_in\" drop"), "{r}");
        assert!(r.contains("chain egress {\n        type filter hook egress device \"rx0\" priority -10; policy drop;\n        counter name \"dropped_out\" drop"), "{r}");
        assert!(r.starts_with("table netdev diodon_diode\ndelete table netdev diodon_diode\n"));
        assert!(r.contains("        ip saddr 10.77.0.1 ip daddr 10.77.0.2 ip protocol udp ip frag-off & 0x1fff != 0 counter name \"fragments\" accept\n"), "{r}");
    }

    #[test]
    fn sender_ruleset_allows_out_drops_in() {
        let r = spec(Role::Sender, false).ruleset();
        assert!(r.contains("hook egress device \"rx0\" priority 10; policy drop;\n        ip daddr 10.77.0.2 udp dport 7700 counter name \"accepted\" accept"), "{r}");
        assert!(r.contains("hook ingress device \"rx0\" priority -10; policy drop;\n        counter name \"dropped_in\" drop"), "{r}");
    }

    #[test]
    fn ipv6_uses_ip6_payload() {
        let s = GuardSpec::new(
            None,
            "rx0",
            Role::Receiver,
            "[fd77::2]:7700".parse().expect("test"),
            Some("fd77::1".parse().expect("test")),
            DEFAULT_TABLE,
        )
        .expect("test");
        assert!(s
            .ruleset()
            .contains("ip6 saddr fd77::1 ip6 daddr fd77::2 udp dport 7700"));
        assert!(GuardSpec::new(
            None,
            "rx0",
            Role::Receiver,
            "[fd77::2]:7700".parse().expect("test"),
            Some("10.0.0.1".parse().expect("test")),
            DEFAULT_TABLE,
        )
        .is_err());
    }

    #[test]
    fn rejects_names_that_would_inject_rules() {
        let peer = "10.77.0.2:7700".parse().expect("test");
        assert!(GuardSpec::new(None, "rx0\" accept", Role::Sender, peer, None, "t").is_err());
        assert!(GuardSpec::new(None, "rx0", Role::Sender, peer, None, "t; flush").is_err());
    }

    /// The JSON nft 1.0.6 printed for the receiver ruleset (handles kept).
    fn live_json(s: &GuardSpec) -> String {
        let mut objs = vec![
            json!({"metainfo": {"version": "1.0.6"}}),
            json!({"table": {"family": "netdev", "name": s.table, "handle": 2}}),
        ];
        for n in [ACCEPTED, FRAGMENTS, DROPPED_IN, DROPPED_OUT] {
            objs.push(json!({"counter": {"family": "netdev", "name": n, "table": s.table, "handle": 3, "packets": 5, "bytes": 70}}));
        }
        for (chain, allow) in s.chains() {
            objs.push(json!({"chain": {"family": "netdev", "table": s.table, "name": chain, "handle": 1, "type": "filter", "hook": chain, "prio": priority(allow), "policy": "drop"}}));
            for expr in s.expected_rules(chain, allow) {
                objs.push(json!({"rule": {"family": "netdev", "table": s.table, "chain": chain, "handle": 6, "expr": expr}}));
            }
        }
        json!({"nftables": objs}).to_string()
    }

    const TEXT: &str = "table netdev diodon_diode {\n chain ingress {\n type filter hook ingress device \"rx0\" priority 10; policy drop;\n }\n chain egress {\n type filter hook egress device \"rx0\" priority 10; policy drop;\n }\n}\n";

    #[test]
    fn compare_accepts_the_expected_table_and_names_differences() {
        let s = spec(Role::Receiver, true);
        let live = parse_live(&live_json(&s)).expect("test");
        compare(&s, &live, TEXT).expect("identical");

        let mut cut = parse_live(&live_json(&s)).expect("test");
        cut.rules.get_mut("ingress").expect("test").remove(0);
        let e = compare(&s, &cut, TEXT).expect_err("rule deleted");
        assert!(e.contains("chain \"ingress\": rule 1 is"), "{e}");

        let mut open = parse_live(&live_json(&s)).expect("test");
        open.chains.get_mut("egress").expect("test")["policy"] = json!("accept");
        let e = compare(&s, &open, TEXT).expect_err("policy");
        assert!(e.contains("policy is \"accept\", expected \"drop\""), "{e}");

        let e = compare(&s, &live, &TEXT.replace("rx0", "eth9")).expect_err("device");
        assert!(e.contains("not attached to device"), "{e}");

        let other = spec(Role::Sender, true);
        assert!(compare(&other, &live, TEXT).is_err(), "role differs");
    }

    #[test]
    fn parses_counters() {
        let text = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"counter": {"family": "netdev", "name": "accepted", "table": "diodon_diode", "handle": 3, "packets": 7, "bytes": 700}}, {"counter": {"family": "netdev", "name": "dropped_in", "table": "diodon_diode", "handle": 4, "packets": 1, "bytes": 76}}]}"#;
        let c = GuardCounters::parse(text).expect("test");
        assert_eq!(
            c.accepted,
            Count {
                packets: 7,
                bytes: 700
            }
        );
        assert_eq!(c.dropped_in.packets, 1);
        assert_eq!(c.dropped_out, Count::default());
        assert_eq!(c.delta(&c), GuardCounters::default());
        assert!(GuardCounters::parse("[]").is_err());
    }
}

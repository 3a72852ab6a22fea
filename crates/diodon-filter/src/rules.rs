//! The ACL rule language: one rule per line, first match wins, a default
//! action for frames no rule matches. This module owns the text, its
//! parser (errors carry the line number) and the rules' meaning
//! ([`Match::matches`], the reference the compiled classifier is tested
//! against); [`crate::classify`] owns the fast form.
//!
//! ```text
//!  # comment                              action: allow | pass | deny | drop
//!  default allow                          (once; allow when absent)
//!  deny src 10.0.0.3,10.0.0.4             lists expand into one rule each, same line
//!  deny src 10.0.0.8/29                   CIDR: host bits must be zero
//!  deny dst 172.16.0.0/12 proto udp dport 53,5353
//!  allow ip6 src 2001:db8::/32 sport 1024-65535
//!  deny smac 02:00:00:00:00:00/24 vlan 100-199
//!  allow ethertype arp                    names: ipv4 ipv6 arp lldp mpls or 0x88cc
//!  allow nonip | deny malformed           frames that are not IP / whose IP header is broken
//!  deny vlan none                         untagged frames ("vlan any": tagged ones)
//! ```
//!
//! Fields: `src`, `dst` (IPv4/IPv6 address or CIDR), `smac`, `dmac` (MAC,
//! optional /prefix), `vlan` (outer VLAN id or range, `none`, `any`),
//! `ethertype` (after the VLAN tags), `ip` / `ip4` / `ip6` / `nonip` /
//! `malformed`, `proto` (name or number), `sport`, `dport` (port or
//! range). Every field at most once per rule; a rule that can never match
//! (an IPv4 source with an IPv6 destination, ports with ICMP, …) is an
//! error, so a typo does not silently become a rule that does nothing.
//! Port rules never match later fragments (they carry no ports).

use crate::frame::{ethertype, proto, Headers, L3};
use std::fmt;
use std::net::IpAddr;

/// Rules one line may expand into (lists multiply).
pub const MAX_RULES_PER_LINE: usize = 65_536;

/// What happens to a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Forwarded to its agent.
    Allow,
    /// Dropped (and counted against the rule).
    Deny,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        })
    }
}

/// An IPv4 or IPv6 prefix with no host bits set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cidr {
    /// IPv4 address and prefix length (0..=32).
    V4(u32, u8),
    /// IPv6 address and prefix length (0..=128).
    V6(u128, u8),
}

impl Cidr {
    /// The inclusive range of addresses (IPv4 in the low 32 bits).
    pub fn range(&self) -> (u128, u128) {
        match *self {
            Cidr::V4(a, len) => {
                let host = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                (u128::from(a), u128::from(a | host))
            }
            Cidr::V6(a, len) => {
                let host = u128::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                (a, a | host)
            }
        }
    }

    /// 4 or 6.
    pub fn family(&self) -> u8 {
        match self {
            Cidr::V4(..) => 4,
            Cidr::V6(..) => 6,
        }
    }

    fn contains(&self, l3: &L3) -> (bool, bool) {
        let (s, d) = l3.addrs();
        let (lo, hi) = self.range();
        let fam = l3.kind() == self.family();
        (fam && (lo..=hi).contains(&s), fam && (lo..=hi).contains(&d))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Cidr::V4(a, 32) => write!(f, "{}", std::net::Ipv4Addr::from(a)),
            Cidr::V4(a, l) => write!(f, "{}/{l}", std::net::Ipv4Addr::from(a)),
            Cidr::V6(a, 128) => write!(f, "{}", std::net::Ipv6Addr::from(a)),
            Cidr::V6(a, l) => write!(f, "{}/{l}", std::net::Ipv6Addr::from(a)),
        }
    }
}

/// A MAC address with a prefix length (48 = exactly this address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MacPrefix {
    /// The address (low 48 bits), host bits zero.
    pub addr: u64,
    /// Prefix length, 0..=48.
    pub len: u8,
}

impl MacPrefix {
    /// The inclusive range of addresses.
    pub fn range(&self) -> (u64, u64) {
        let host = ((1u64 << 48) - 1) >> self.len.min(48);
        (self.addr, self.addr | host)
    }
}

impl fmt::Display for MacPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = crate::frame::Mac::from_u64(self.addr);
        if self.len == 48 {
            write!(f, "{m}")
        } else {
            write!(f, "{m}/{}", self.len)
        }
    }
}

/// Which layer-3 kinds a rule accepts (besides what `src`/`dst` imply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L3Match {
    /// IPv4 or IPv6.
    Ip,
    /// IPv4.
    Ip4,
    /// IPv6.
    Ip6,
    /// Not IP.
    NonIp,
    /// IP EtherType with a broken header.
    Malformed,
}

impl L3Match {
    fn kinds(self) -> (u8, u8) {
        match self {
            L3Match::Ip => (4, 6),
            L3Match::Ip4 => (4, 4),
            L3Match::Ip6 => (6, 6),
            L3Match::NonIp => (0, 0),
            L3Match::Malformed => (1, 1),
        }
    }

    fn keyword(self) -> &'static str {
        match self {
            L3Match::Ip => "ip",
            L3Match::Ip4 => "ip4",
            L3Match::Ip6 => "ip6",
            L3Match::NonIp => "nonip",
            L3Match::Malformed => "malformed",
        }
    }
}

/// The outer VLAN a rule accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VlanMatch {
    /// Untagged frames only.
    None,
    /// Tagged frames whose outer VLAN id is in this inclusive range.
    Ids(u16, u16),
}

/// One rule's conditions; `None` is "any". A frame matches when every
/// given field matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Match {
    /// Source MAC.
    pub smac: Option<MacPrefix>,
    /// Destination MAC.
    pub dmac: Option<MacPrefix>,
    /// Outer VLAN.
    pub vlan: Option<VlanMatch>,
    /// EtherType after the tags.
    pub ethertype: Option<u16>,
    /// Layer-3 kind.
    pub l3: Option<L3Match>,
    /// Source prefix (implies its family).
    pub src: Option<Cidr>,
    /// Destination prefix (implies its family).
    pub dst: Option<Cidr>,
    /// Upper-layer protocol (implies IP).
    pub proto: Option<u8>,
    /// Source port range (implies a protocol with ports, not a later fragment).
    pub sport: Option<(u16, u16)>,
    /// Destination port range.
    pub dport: Option<(u16, u16)>,
}

impl Match {
    /// Whether `h` satisfies every condition: the definition of a match,
    /// written field by field (the compiled classifier must agree with it).
    pub fn matches(&self, h: &Headers) -> bool {
        let mac = |p: &Option<MacPrefix>, m: crate::frame::Mac| {
            p.is_none_or(|p| {
                let (lo, hi) = p.range();
                (lo..=hi).contains(&m.to_u64())
            })
        };
        let port = |r: &Option<(u16, u16)>, p: Option<u16>| {
            r.is_none_or(|(lo, hi)| p.is_some_and(|p| (lo..=hi).contains(&p)))
        };
        mac(&self.smac, h.src_mac)
            && mac(&self.dmac, h.dst_mac)
            && self.vlan.is_none_or(|v| match (v, h.vlan) {
                (VlanMatch::None, None) => true,
                (VlanMatch::Ids(lo, hi), Some(id)) => (lo..=hi).contains(&id),
                _ => false,
            })
            && self.ethertype.is_none_or(|t| t == h.ethertype)
            && self.l3.is_none_or(|l| {
                let (lo, hi) = l.kinds();
                (lo..=hi).contains(&h.l3.kind())
            })
            && self.src.is_none_or(|c| c.contains(&h.l3).0)
            && self.dst.is_none_or(|c| c.contains(&h.l3).1)
            && self.proto.is_none_or(|p| h.proto == Some(p))
            && port(&self.sport, h.ports.map(|p| p.0))
            && port(&self.dport, h.ports.map(|p| p.1))
    }

    /// The family the rule's fields pin (4 or 6), if any.
    fn family(&self) -> Option<u8> {
        self.src
            .map(|c| c.family())
            .or(self.dst.map(|c| c.family()))
    }

    /// Why this rule can never match, if it cannot.
    fn contradiction(&self) -> Option<&'static str> {
        if let (Some(s), Some(d)) = (self.src, self.dst) {
            if s.family() != d.family() {
                return Some("source and destination are of different IP versions");
            }
        }
        let family = self.family();
        let ip_only = family.is_some()
            || self.proto.is_some()
            || self.sport.is_some()
            || self.dport.is_some();
        match (self.l3, family) {
            (Some(L3Match::NonIp | L3Match::Malformed), _) if ip_only => {
                return Some("addresses, protocols and ports need a well-formed IP frame")
            }
            (Some(L3Match::Ip4), Some(6)) | (Some(L3Match::Ip6), Some(4)) => {
                return Some("the IP version contradicts the addresses")
            }
            _ => {}
        }
        if let Some(t) = self.ethertype {
            let ip_kind = match (self.l3, family) {
                (_, Some(4)) | (Some(L3Match::Ip4), _) => Some(ethertype::IPV4),
                (_, Some(6)) | (Some(L3Match::Ip6), _) => Some(ethertype::IPV6),
                _ => None,
            };
            if ip_kind.is_some_and(|k| k != t)
                || (matches!(self.l3, Some(L3Match::Ip)) || ip_only)
                    && t != ethertype::IPV4
                    && t != ethertype::IPV6
            {
                return Some("the EtherType contradicts the IP fields");
            }
            if matches!(self.l3, Some(L3Match::NonIp))
                && (t == ethertype::IPV4 || t == ethertype::IPV6)
            {
                return Some("an IP EtherType is never a non-IP frame");
            }
            if matches!(self.l3, Some(L3Match::Malformed))
                && t != ethertype::IPV4
                && t != ethertype::IPV6
            {
                return Some("only IP EtherTypes can be malformed IP");
            }
        }
        if (self.sport.is_some() || self.dport.is_some())
            && self.proto.is_some_and(|p| !proto::has_ports(p))
        {
            return Some("this protocol has no ports");
        }
        for (lo, hi) in [self.sport, self.dport].into_iter().flatten() {
            if lo > hi {
                return Some("a port range runs backwards");
            }
        }
        if let Some(VlanMatch::Ids(lo, hi)) = self.vlan {
            if lo > hi || hi > 4095 {
                return Some("VLAN ids are 0-4095 and ranges run upwards");
            }
        }
        None
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let range = |(lo, hi): (u16, u16)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        };
        if let Some(l) = self.l3 {
            write!(f, " {}", l.keyword())?;
        }
        if let Some(m) = self.smac {
            write!(f, " smac {m}")?;
        }
        if let Some(m) = self.dmac {
            write!(f, " dmac {m}")?;
        }
        match self.vlan {
            Some(VlanMatch::None) => write!(f, " vlan none")?,
            Some(VlanMatch::Ids(0, 4095)) => write!(f, " vlan any")?,
            Some(VlanMatch::Ids(lo, hi)) => write!(f, " vlan {}", range((lo, hi)))?,
            None => {}
        }
        if let Some(t) = self.ethertype {
            write!(f, " ethertype 0x{t:04x}")?;
        }
        if let Some(c) = self.src {
            write!(f, " src {c}")?;
        }
        if let Some(c) = self.dst {
            write!(f, " dst {c}")?;
        }
        if let Some(p) = self.proto {
            write!(f, " proto {p}")?;
        }
        if let Some(r) = self.sport {
            write!(f, " sport {}", range(r))?;
        }
        if let Some(r) = self.dport {
            write!(f, " dport {}", range(r))?;
        }
        Ok(())
    }
}

/// One rule: an action, its conditions, and the line it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    /// What happens to a matching frame.
    pub action: Action,
    /// The conditions.
    pub m: Match,
    /// 1-based line in the rule file (0 for rules built in code).
    pub line: u32,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.action, self.m)
    }
}

/// An ordered rule list and the default action.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleSet {
    /// Rules, first match wins.
    pub rules: Vec<Rule>,
    /// For frames no rule matches.
    pub default: Option<Action>,
}

impl RuleSet {
    /// The default action (allow when the file names none).
    pub fn default_action(&self) -> Action {
        self.default.unwrap_or(Action::Allow)
    }

    /// The first matching rule's index and action, or the default with
    /// `None`: the naive linear reference the classifier is tested against.
    pub fn first_match(&self, h: &Headers) -> (Option<usize>, Action) {
        self.rules
            .iter()
            .position(|r| r.m.matches(h))
            .map_or((None, self.default_action()), |i| {
                (Some(i), self.rules[i].action)
            })
    }

    /// Parses a rule file.
    pub fn parse(text: &str) -> Result<RuleSet, RuleError> {
        let mut set = RuleSet::default();
        for (i, raw) in text.lines().enumerate() {
            let line = u32::try_from(i + 1).unwrap_or(u32::MAX);
            let err = |kind| RuleError { line, kind };
            let body = raw.split('#').next().unwrap_or_default();
            let mut words = body.split_whitespace();
            let Some(first) = words.next() else { continue };
            if first == "default" {
                let a = words
                    .next()
                    .ok_or(err(ErrorKind::Missing("default", "allow or deny")))?;
                let a = action(a).ok_or_else(|| err(ErrorKind::BadAction(a.to_owned())))?;
                if let Some(extra) = words.next() {
                    return Err(err(ErrorKind::Unexpected(extra.to_owned())));
                }
                if set.default.replace(a).is_some() {
                    return Err(err(ErrorKind::DefaultTwice));
                }
                continue;
            }
            let act = action(first).ok_or_else(|| err(ErrorKind::BadAction(first.to_owned())))?;
            let matches = parse_matches(words).map_err(err)?;
            for m in matches {
                if let Some(why) = m.contradiction() {
                    return Err(err(ErrorKind::NeverMatches(why)));
                }
                set.rules.push(Rule {
                    action: act,
                    m,
                    line,
                });
            }
        }
        Ok(set)
    }
}

impl fmt::Display for RuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(d) = self.default {
            writeln!(f, "default {d}")?;
        }
        for r in &self.rules {
            writeln!(f, "{r}")?;
        }
        Ok(())
    }
}

/// A rule file that does not parse: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct RuleError {
    /// 1-based line number.
    pub line: u32,
    /// What is wrong.
    pub kind: ErrorKind,
}

/// What is wrong with a rule line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The first word is not an action.
    #[error("'{0}' is not an action (allow, pass, deny, drop) or 'default'")]
    BadAction(String),
    /// Not a field keyword.
    #[error("unknown field '{0}' (fields: src dst smac dmac vlan ethertype ip ip4 ip6 nonip malformed proto sport dport)")]
    UnknownField(String),
    /// A field without its value.
    #[error("'{0}' needs a value ({1})")]
    Missing(&'static str, &'static str),
    /// A value that does not parse.
    #[error("'{0}' is not a valid {1}")]
    BadValue(String, &'static str),
    /// A prefix with host bits set (likely a typo).
    #[error("{given} has host bits set (did you mean {suggestion}?)")]
    HostBits {
        /// What was written.
        given: String,
        /// The prefix with the host bits cleared.
        suggestion: String,
    },
    /// A field given twice in one rule.
    #[error("'{0}' given twice in one rule")]
    Duplicate(&'static str),
    /// Conditions that exclude each other.
    #[error("this rule can never match: {0}")]
    NeverMatches(&'static str),
    /// A second `default` line.
    #[error("a second 'default' line")]
    DefaultTwice,
    /// Words after a complete statement.
    #[error("unexpected '{0}'")]
    Unexpected(String),
    /// Lists that multiply into too many rules.
    #[error("the lists on this line expand into more than {MAX_RULES_PER_LINE} rules")]
    TooManyRules,
}

fn action(w: &str) -> Option<Action> {
    match w {
        "allow" | "pass" => Some(Action::Allow),
        "deny" | "drop" => Some(Action::Deny),
        _ => None,
    }
}

/// Parses the fields of one rule into the rules its lists expand to.
fn parse_matches<'a>(mut words: impl Iterator<Item = &'a str>) -> Result<Vec<Match>, ErrorKind> {
    let mut out = vec![Match::default()];
    let mut seen: Vec<&'static str> = Vec::new();
    while let Some(w) = words.next() {
        let field: &'static str = match w {
            "src" => "src",
            "dst" => "dst",
            "smac" => "smac",
            "dmac" => "dmac",
            "vlan" => "vlan",
            "ethertype" => "ethertype",
            "proto" => "proto",
            "sport" => "sport",
            "dport" => "dport",
            "ip" | "ip4" | "ip6" | "nonip" | "malformed" => "l3",
            other => return Err(ErrorKind::UnknownField(other.to_owned())),
        };
        if seen.contains(&field) {
            return Err(ErrorKind::Duplicate(if field == "l3" {
                "ip version"
            } else {
                field
            }));
        }
        seen.push(field);
        if field == "l3" {
            let l = match w {
                "ip" => L3Match::Ip,
                "ip4" => L3Match::Ip4,
                "ip6" => L3Match::Ip6,
                "nonip" => L3Match::NonIp,
                _ => L3Match::Malformed,
            };
            for m in &mut out {
                m.l3 = Some(l);
            }
            continue;
        }
        let hint = match field {
            "src" | "dst" => "an IP address or prefix",
            "smac" | "dmac" => "a MAC address or prefix",
            "vlan" => "a VLAN id, range, 'none' or 'any'",
            "ethertype" => "an EtherType",
            "proto" => "a protocol name or number",
            _ => "a port or port range",
        };
        let value = words.next().ok_or(ErrorKind::Missing(field, hint))?;
        let mut next = Vec::new();
        for item in value.split(',') {
            let v = match field {
                "src" => Value::Src(cidr(item)?),
                "dst" => Value::Dst(cidr(item)?),
                "smac" => Value::Smac(mac_prefix(item)?),
                "dmac" => Value::Dmac(mac_prefix(item)?),
                "vlan" => Value::Vlan(vlan(item)?),
                "ethertype" => Value::Ethertype(ethertype_value(item)?),
                "proto" => Value::Proto(proto_value(item)?),
                "sport" => Value::Sport(port_range(item)?),
                _ => Value::Dport(port_range(item)?),
            };
            for m in &out {
                let mut m = *m;
                v.apply(&mut m);
                next.push(m);
                if next.len() > MAX_RULES_PER_LINE {
                    return Err(ErrorKind::TooManyRules);
                }
            }
        }
        out = next;
    }
    Ok(out)
}

/// One parsed field value of a list.
#[derive(Clone, Copy)]
enum Value {
    Src(Cidr),
    Dst(Cidr),
    Smac(MacPrefix),
    Dmac(MacPrefix),
    Vlan(VlanMatch),
    Ethertype(u16),
    Proto(u8),
    Sport((u16, u16)),
    Dport((u16, u16)),
}

impl Value {
    fn apply(self, m: &mut Match) {
        match self {
            Value::Src(c) => m.src = Some(c),
            Value::Dst(c) => m.dst = Some(c),
            Value::Smac(p) => m.smac = Some(p),
            Value::Dmac(p) => m.dmac = Some(p),
            Value::Vlan(v) => m.vlan = Some(v),
            Value::Ethertype(t) => m.ethertype = Some(t),
            Value::Proto(p) => m.proto = Some(p),
            Value::Sport(r) => m.sport = Some(r),
            Value::Dport(r) => m.dport = Some(r),
        }
    }
}

fn cidr(s: &str) -> Result<Cidr, ErrorKind> {
    let bad = || ErrorKind::BadValue(s.to_owned(), "IP address or prefix");
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().map_err(|_| bad())?;
    let c = match ip {
        IpAddr::V4(a) => {
            let len = len.unwrap_or(32);
            if len > 32 {
                return Err(bad());
            }
            Cidr::V4(u32::from(a), len)
        }
        IpAddr::V6(a) => {
            let len = len.unwrap_or(128);
            if len > 128 {
                return Err(bad());
            }
            Cidr::V6(u128::from(a), len)
        }
    };
    let (lo, _) = c.range();
    let clean = match c {
        Cidr::V4(a, l) => Cidr::V4(a & !(u32::MAX.checked_shr(u32::from(l)).unwrap_or(0)), l),
        Cidr::V6(a, l) => Cidr::V6(a & !(u128::MAX.checked_shr(u32::from(l)).unwrap_or(0)), l),
    };
    if clean.range().0 == lo {
        Ok(c)
    } else {
        Err(ErrorKind::HostBits {
            given: s.to_owned(),
            suggestion: clean.to_string(),
        })
    }
}

fn mac_prefix(s: &str) -> Result<MacPrefix, ErrorKind> {
    let bad = || ErrorKind::BadValue(s.to_owned(), "MAC address or prefix");
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, l.parse::<u8>().map_err(|_| bad())?),
        None => (s, 48),
    };
    if len > 48 {
        return Err(bad());
    }
    let mac: crate::frame::Mac = addr.parse().map_err(|()| bad())?;
    let p = MacPrefix {
        addr: mac.to_u64(),
        len,
    };
    let host = ((1u64 << 48) - 1) >> len;
    if p.addr & host != 0 {
        let clean = MacPrefix {
            addr: p.addr & !host,
            len,
        };
        return Err(ErrorKind::HostBits {
            given: s.to_owned(),
            suggestion: clean.to_string(),
        });
    }
    Ok(p)
}

fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn vlan(s: &str) -> Result<VlanMatch, ErrorKind> {
    match s {
        "none" => Ok(VlanMatch::None),
        "any" => Ok(VlanMatch::Ids(0, 4095)),
        _ => {
            let (lo, hi) = range(s, 4095)
                .ok_or_else(|| ErrorKind::BadValue(s.to_owned(), "VLAN id or range (0-4095)"))?;
            Ok(VlanMatch::Ids(lo, hi))
        }
    }
}

fn range(s: &str, max: u64) -> Option<(u16, u16)> {
    let (lo, hi) = if let Some((a, b)) = s.split_once('-') {
        (number(a)?, number(b)?)
    } else {
        let v = number(s)?;
        (v, v)
    };
    (lo <= hi && hi <= max).then_some((lo as u16, hi as u16))
}

fn port_range(s: &str) -> Result<(u16, u16), ErrorKind> {
    range(s, 65_535).ok_or_else(|| ErrorKind::BadValue(s.to_owned(), "port or range (0-65535)"))
}

fn ethertype_value(s: &str) -> Result<u16, ErrorKind> {
    let named = match s {
        "ipv4" => Some(ethertype::IPV4),
        "ipv6" => Some(ethertype::IPV6),
        "arp" => Some(ethertype::ARP),
        "lldp" => Some(0x88cc),
        "mpls" => Some(0x8847),
        _ => None,
    };
    named
        .or_else(|| number(s).and_then(|v| u16::try_from(v).ok()))
        .filter(|t| !ethertype::is_tag(*t))
        .ok_or_else(|| {
            ErrorKind::BadValue(
                s.to_owned(),
                "EtherType (a name, 0x0800 or decimal; VLAN tags are matched with 'vlan')",
            )
        })
}

fn proto_value(s: &str) -> Result<u8, ErrorKind> {
    let named = match s {
        "icmp" => Some(proto::ICMP),
        "tcp" => Some(proto::TCP),
        "udp" => Some(proto::UDP),
        "dccp" => Some(proto::DCCP),
        "gre" => Some(proto::GRE),
        "esp" => Some(proto::ESP),
        "ah" => Some(proto::AH),
        "icmp6" | "ipv6-icmp" => Some(proto::ICMPV6),
        "sctp" => Some(proto::SCTP),
        "udplite" => Some(proto::UDPLITE),
        _ => None,
    };
    named
        .or_else(|| number(s).and_then(|v| u8::try_from(v).ok()))
        .ok_or_else(|| ErrorKind::BadValue(s.to_owned(), "protocol (a name or 0-255)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thesis_rules_parse() {
        let text = "# Table 4.3\n\
            deny src 10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6,10.0.0.7\n\
            deny src 10.0.0.8/29\n\
            deny src 192.168.1.0/24\n\
            deny dst 172.16.0.0/12 proto udp dport 53\n\
            default allow\n";
        let set = RuleSet::parse(text).unwrap();
        assert_eq!(set.rules.len(), 8);
        assert_eq!(set.rules[4].line, 2);
        assert_eq!(set.rules[5].line, 3);
        assert_eq!(set.default, Some(Action::Allow));
        assert_eq!(
            set.rules[7].to_string(),
            "deny dst 172.16.0.0/12 proto 17 dport 53"
        );
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let cases = [
            (
                "allow src 10.0.0.1\ndeny dprot 80\n",
                2,
                "unknown field 'dprot'",
            ),
            ("\n\ndeny src 10.0.0.8/28\n", 3, "did you mean 10.0.0.0/28"),
            ("deny src 10.0.0.1 dst 2001:db8::1\n", 1, "never match"),
            ("deny proto icmp dport 80\n", 1, "no ports"),
            ("deny src\n", 1, "needs a value"),
            ("alow src 10.0.0.1\n", 1, "not an action"),
            ("default deny\ndefault allow\n", 2, "second 'default'"),
            ("deny dport 80-20\n", 1, "not a valid port"),
            ("deny nonip proto tcp\n", 1, "never match"),
            ("deny vlan 4096\n", 1, "VLAN"),
            ("deny ethertype arp ip4\n", 1, "EtherType contradicts"),
            ("deny src 10.0.0.1 src 10.0.0.2\n", 1, "twice"),
            (
                "deny smac 02:00:00:00:00:01/24\n",
                1,
                "did you mean 02:00:00:00:00:00/24",
            ),
        ];
        for (text, line, what) in cases {
            let e = RuleSet::parse(text).map(|s| s.to_string()).expect_err(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")), "{e}");
        }
    }

    #[test]
    fn display_parses_back_to_the_same_rules() {
        let text = "default deny\n\
            allow ip6 src 2001:db8::/32 sport 1024-65535\n\
            deny smac 02:00:00:00:00:00/24 vlan 100-199\n\
            allow ethertype arp\nallow nonip vlan none\ndeny malformed\nallow vlan any dmac 02:00:00:00:00:09\n";
        let set = RuleSet::parse(text).unwrap();
        let back = RuleSet::parse(&set.to_string()).unwrap();
        let strip = |s: &RuleSet| s.rules.iter().map(|r| (r.action, r.m)).collect::<Vec<_>>();
        assert_eq!(strip(&set), strip(&back));
        assert_eq!(set.default, back.default);
    }

    #[test]
    fn lists_multiply_and_are_bounded() {
        let set = RuleSet::parse("deny src 10.0.0.1,10.0.0.2 dport 1,2,3\n").unwrap();
        assert_eq!(set.rules.len(), 6);
        let many: Vec<String> = (0..300).map(|p| p.to_string()).collect();
        let line = format!("deny sport {} dport {}\n", many.join(","), many.join(","));
        assert_eq!(
            RuleSet::parse(&line).unwrap_err().kind,
            ErrorKind::TooManyRules
        );
    }
}

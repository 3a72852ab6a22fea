//! The diode a run measures: both ends (namespace, interface, address), the
//! port, the guard specs for its own counting table, and the measuring
//! points read at both ends before and after every trial.
//!
//! ```text
//!  plan [link] + testbed name ─► Diode { tx ns/if/addr ═══ link ═══► rx ns/if/addr : port }
//!                                  ├─ guard_specs()  (sender, receiver) for TRIAL_TABLE
//!                                  └─ snapshots()    stats::Snapshot of tx and of rx
//! ```
//!
//! On a real diode (`link.testbed = false`) the harness counts with a guard
//! table of its own, [`TRIAL_TABLE`]; the operator's guard (`diodon guard
//! apply`, table [`guard::DEFAULT_TABLE`]) is never replaced or removed.
//! Without `link.guard` the datagram columns come from the operator's guard,
//! if one is loaded.

use crate::plan::{Plan, PlanError};
use diodon_apps::guard::{self, GuardError, GuardSpec, Role};
use diodon_apps::stats::{self, Snapshot, StatsError, Target};
use std::net::{IpAddr, SocketAddr};

/// The guard table the harness loads for its own counting. Not the
/// operator's [`guard::DEFAULT_TABLE`], which it must never replace or remove.
pub const TRIAL_TABLE: &str = "diodon_trial";

/// A given diode that is not there.
#[derive(Debug, thiserror::Error)]
pub enum DiodeError {
    /// A namespace the plan names does not exist.
    #[error("network namespace {ns:?} (plan [link] tx_ns / rx_ns) does not exist")]
    NoNamespace {
        /// The namespace.
        ns: String,
    },
    /// An interface the plan names cannot be read in its namespace.
    #[error("interface {iface:?} in namespace {ns:?}: {source}")]
    NoInterface {
        /// The interface.
        iface: String,
        /// The namespace.
        ns: String,
        /// Why it cannot be read.
        #[source]
        source: StatsError,
    },
}

/// Resolved link endpoints.
#[derive(Clone, Debug)]
pub struct Diode {
    /// Sender's namespace.
    pub tx_ns: String,
    /// Receiver's namespace.
    pub rx_ns: String,
    /// Sender's diode interface.
    pub tx_if: String,
    /// Receiver's diode interface.
    pub rx_if: String,
    /// Sender's address.
    pub tx_addr: IpAddr,
    /// Receiver's address.
    pub rx_addr: IpAddr,
    /// The receiver's UDP port.
    pub port: u16,
    /// Where the `dtgrms_*` columns are read: [`TRIAL_TABLE`] when the plan
    /// loads guards, else the operator's [`guard::DEFAULT_TABLE`].
    pub guard_table: &'static str,
}

impl Diode {
    /// The diode of `plan`; the testbed's namespaces (`NAME-tx`, `NAME-rx`)
    /// unless the plan names others.
    pub fn of(plan: &Plan, testbed_name: &str) -> Result<Diode, PlanError> {
        let addr = |s: &str| -> Result<IpAddr, PlanError> {
            s.parse()
                .map_err(|_| PlanError::Invalid(format!("bad address {s:?}")))
        };
        let link = &plan.link;
        Ok(Diode {
            tx_ns: link
                .tx_ns
                .clone()
                .unwrap_or_else(|| format!("{testbed_name}-tx")),
            rx_ns: link
                .rx_ns
                .clone()
                .unwrap_or_else(|| format!("{testbed_name}-rx")),
            tx_if: link.tx_if.clone(),
            rx_if: link.rx_if.clone(),
            tx_addr: addr(&link.tx_addr)?,
            rx_addr: addr(&link.rx_addr)?,
            port: link.port,
            guard_table: if link.guard {
                TRIAL_TABLE
            } else {
                guard::DEFAULT_TABLE
            },
        })
    }

    /// The receiver's socket address.
    pub fn peer(&self) -> SocketAddr {
        SocketAddr::new(self.rx_addr, self.port)
    }

    /// On a given diode: both namespaces and both interfaces must be there
    /// before anything is changed (sysctls, guards).
    pub fn check_exist(&self) -> Result<(), DiodeError> {
        for (ns, iface) in [(&self.tx_ns, &self.tx_if), (&self.rx_ns, &self.rx_if)] {
            if !diodon_io::netns::path_of(ns).exists() {
                return Err(DiodeError::NoNamespace { ns: ns.clone() });
            }
            stats::read_link(Some(ns.as_str()), iface).map_err(|source| {
                DiodeError::NoInterface {
                    iface: iface.clone(),
                    ns: ns.clone(),
                    source,
                }
            })?;
        }
        Ok(())
    }

    /// The guards of both ends for the harness's own table: the sender lets
    /// out only the diode's datagrams, the receiver lets only them in.
    pub fn guard_specs(&self) -> Result<(GuardSpec, GuardSpec), GuardError> {
        let tx = GuardSpec::new(
            Some(self.tx_ns.clone()),
            &self.tx_if,
            Role::Sender,
            self.peer(),
            Some(self.tx_addr),
            TRIAL_TABLE,
        )?;
        let rx = GuardSpec {
            ns: Some(self.rx_ns.clone()),
            iface: self.rx_if.clone(),
            role: Role::Receiver,
            ..tx.clone()
        };
        Ok((tx, rx))
    }

    /// Every measuring point of the sending and of the receiving end.
    pub fn snapshots(&self) -> Result<(Snapshot, Snapshot), StatsError> {
        let t = |ns: &str, iface: &str| Target {
            ns: Some(ns.to_owned()),
            iface: Some(iface.to_owned()),
            guard_table: self.guard_table.to_owned(),
            diodon: None,
        };
        Ok((
            Snapshot::read(&t(&self.tx_ns, &self.tx_if))?,
            Snapshot::read(&t(&self.rx_ns, &self.rx_if))?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_resolves_to_the_testbed_or_the_named_diode() {
        let plan =
            Plan::parse("tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\n").expect("plan");
        let d = Diode::of(&plan, "dtr7").expect("diode");
        assert_eq!((d.tx_ns.as_str(), d.rx_ns.as_str()), ("dtr7-tx", "dtr7-rx"));
        assert_eq!(d.peer().port(), 7790);
        assert_eq!(d.guard_table, TRIAL_TABLE);
        let (tx, rx) = d.guard_specs().expect("specs");
        assert_eq!((tx.role, rx.role), (Role::Sender, Role::Receiver));
        assert_eq!(rx.ns.as_deref(), Some("dtr7-rx"));
        assert_eq!(tx.peer, rx.peer);
        let given = Plan::parse(
            "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\n[link]\ntestbed = false\nguard = false\ntx_ns = \"a\"\nrx_ns = \"b\"\n",
        )
        .expect("plan");
        let d = Diode::of(&given, "unused").expect("diode");
        assert_eq!((d.tx_ns.as_str(), d.rx_ns.as_str()), ("a", "b"));
        assert_eq!(d.guard_table, guard::DEFAULT_TABLE, "the operator's guard");
        let e = d.check_exist().expect_err("no namespace a");
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}

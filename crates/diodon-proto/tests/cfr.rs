//! Simulated channel-failure rate (the packet-loss thesis's CFR, §2.7):
//! 1000 trials of a 1 MB channel at 1 % random loss. With 10 % repair every
//! channel must complete; with no repair the receiver's count of complete
//! channels must equal, exactly, the number of trials in which every block
//! (and the open and trailer) arrived — what the oracle saw on the link.
mod common;

use common::oracle::Oracle;
use common::{payload, Transfer};
use diodon_proto::{ReceiverConfig, RepairRatio, SenderConfig};
use diodon_sim::{Bernoulli, Link, Seed, SeedReport};
use std::time::Duration;

const TRIALS: u64 = 1000;
const SIZE: usize = 1_000_000;

/// Returns (complete, deliverable-by-oracle) over all trials.
fn trials(name: &str, repair: u32, loss: f64, seed: Seed) -> (u64, u64) {
    let _report = SeedReport::new(name, &seed);
    let data = vec![payload(seed.0, SIZE)];
    let (mut complete, mut deliverable) = (0, 0);
    for trial in 0..TRIALS {
        let scfg = SenderConfig {
            repair: RepairRatio::percent(repair).expect("valid ratio"),
            ..SenderConfig::default()
        };
        let (oracle, tally) = Oracle::new(scfg.integrity.clone());
        let mut link = Link::new()
            .with(Bernoulli::new(loss, seed.derive(trial)))
            .with(oracle);
        let mut t = Transfer::new(
            scfg,
            ReceiverConfig::default(),
            seed.derive(trial).0 | 1,
            &data,
        );
        t.run(&mut link, Duration::from_secs(30));
        let id = t.channels[0].0;
        let ok = t.out.complete.get(&id).is_some_and(|got| *got == data[0]);
        assert!(
            ok || t.out.failed.contains_key(&id),
            "{name}: trial {trial} has no verdict"
        );
        let could = tally.borrow().deliverable(id);
        assert_eq!(
            ok, could,
            "{name}: trial {trial}: receiver verdict {ok} but the oracle says {could}"
        );
        complete += u64::from(ok);
        deliverable += u64::from(could);
    }
    eprintln!("{name}: CFR {complete}/{TRIALS} (oracle: {deliverable})");
    (complete, deliverable)
}

#[test]
fn cfr_is_100_percent_with_10_percent_repair_at_1_percent_loss() {
    let seed = Seed::from_env_or(11);
    let (complete, _) = trials("cfr_repair_10", 10, 0.01, seed);
    assert_eq!(complete, TRIALS);
}

#[test]
fn cfr_without_repair_is_reported_exactly() {
    let seed = Seed::from_env_or(12);
    let (complete, deliverable) = trials("cfr_repair_0", 0, 0.01, seed);
    assert_eq!(complete, deliverable);
    // 1 MB is ~710 datagrams: at 1 % loss almost every trial loses one.
    assert!(
        complete < TRIALS / 10,
        "without repair most channels must fail, got {complete}"
    );
}

#[test]
fn cfr_without_repair_at_0_1_percent_loss_is_exact_and_non_trivial() {
    // At 0.1 % loss about half of the trials lose nothing: the count is
    // neither 0 nor 1000, so exactness is really tested.
    let seed = Seed::from_env_or(13);
    let (complete, deliverable) = trials("cfr_repair_0_loss_0_1", 0, 0.001, seed);
    assert_eq!(complete, deliverable);
    assert!(complete > 0 && complete < TRIALS, "got {complete}");
}

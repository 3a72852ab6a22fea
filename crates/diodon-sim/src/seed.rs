//! Seeds: where every random element of a simulation gets its randomness, and
//! how a failing test tells you how to replay it.
//!
//! ```text
//!   SIM_SEED (env) ──or default──▶ Seed ──derive(i)──▶ Seed_i ──rng()──▶ ChaCha8Rng
//!                                   │
//!                                   └──▶ SeedReport (prints "SIM_SEED=… reproduces
//!                                         this failure" if the test panics)
//! ```

use std::fmt;
use std::str::FromStr;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The name of the environment variable that overrides test seeds.
pub const SIM_SEED_VAR: &str = "SIM_SEED";

/// A 64-bit simulation seed. Every test that uses randomness gets its seed
/// from [`Seed::from_env_or`], so `SIM_SEED=<n> cargo test <name>` replays it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Seed(pub u64);

impl Seed {
    /// The `SIM_SEED` environment variable if set (decimal or `0x`-hex),
    /// else `default`.
    ///
    /// # Panics
    /// If `SIM_SEED` is set but is not a valid seed: a replay request that is
    /// silently ignored would be worse than a loud failure.
    pub fn from_env_or(default: u64) -> Seed {
        let value = std::env::var(SIM_SEED_VAR).ok();
        match Seed::from_value_or(value.as_deref(), default) {
            Ok(seed) => seed,
            Err(e) => panic!("{SIM_SEED_VAR}: {e}"),
        }
    }

    /// What [`Seed::from_env_or`] does with the variable's `value`: parse it
    /// if present (an empty or all-blank value counts as unset), else `default`.
    pub fn from_value_or(value: Option<&str>, default: u64) -> Result<Seed, ParseSeedError> {
        match value {
            Some(v) if !v.trim().is_empty() => v.parse(),
            _ => Ok(Seed(default)),
        }
    }

    /// Derives an independent sub-seed for `stream` (e.g. trial `i`, or one
    /// node of a chain), deterministically, splitmix64 style. For a fixed
    /// seed, distinct streams always give distinct sub-seeds.
    #[must_use]
    pub fn derive(&self, stream: u64) -> Seed {
        Seed(splitmix64(self.0 ^ splitmix64(stream)))
    }

    /// A fresh random generator seeded from this seed.
    pub fn rng(&self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.0)
    }
}

impl fmt::Display for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for Seed {
    type Err = ParseSeedError;

    /// Parses a decimal (`12345`) or hexadecimal (`0x3039`, `0X3039`) `u64`,
    /// ignoring surrounding whitespace and `_` digit separators.
    fn from_str(s: &str) -> Result<Seed, ParseSeedError> {
        let cleaned: String = s.trim().chars().filter(|&c| c != '_').collect();
        let parsed = match cleaned
            .strip_prefix("0x")
            .or_else(|| cleaned.strip_prefix("0X"))
        {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => cleaned.parse::<u64>(),
        };
        parsed.map(Seed).map_err(|_| ParseSeedError {
            input: s.to_owned(),
        })
    }
}

/// A seed string that is neither a decimal nor a `0x`-hex `u64`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseSeedError {
    /// The rejected input.
    pub input: String,
}

impl fmt::Display for ParseSeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a seed (expected a decimal or 0x-hex u64)",
            self.input
        )
    }
}

impl std::error::Error for ParseSeedError {}

/// Guard that prints `SIM_SEED=<seed> reproduces this failure (test <name>)`
/// to stderr if it is dropped while the thread is panicking, i.e. when the
/// test that holds it fails.
///
/// Hold it for the whole test: `let _report = SeedReport::new("name", &seed);`
/// (a bare `_` would drop it at once).
#[derive(Debug)]
pub struct SeedReport {
    test_name: String,
    seed: Seed,
}

impl SeedReport {
    /// Arms the report for `test_name`, run with `seed`.
    pub fn new(test_name: &str, seed: &Seed) -> SeedReport {
        SeedReport {
            test_name: test_name.to_owned(),
            seed: *seed,
        }
    }

    /// The seed this report prints.
    pub fn seed(&self) -> Seed {
        self.seed
    }

    /// The line printed on failure.
    pub fn message(&self) -> String {
        format!(
            "{SIM_SEED_VAR}={} reproduces this failure (test {})",
            self.seed, self.test_name
        )
    }
}

impl Drop for SeedReport {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.message());
        }
    }
}

/// The splitmix64 finaliser (Steele, Lea, Flood 2014): a bijective mix of
/// `z + golden gamma`.
fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use rand::Rng;

    use super::*;

    #[test]
    fn parses_decimal_and_hex() {
        assert_eq!("12345".parse::<Seed>(), Ok(Seed(12345)));
        assert_eq!(" 42\n".parse::<Seed>(), Ok(Seed(42)));
        assert_eq!("0x3039".parse::<Seed>(), Ok(Seed(12345)));
        assert_eq!("0XdeadBEEF".parse::<Seed>(), Ok(Seed(0xDEAD_BEEF)));
        assert_eq!("1_000".parse::<Seed>(), Ok(Seed(1000)));
        assert_eq!("18446744073709551615".parse::<Seed>(), Ok(Seed(u64::MAX)));
        assert_eq!("0xffffffffffffffff".parse::<Seed>(), Ok(Seed(u64::MAX)));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "abc",
            "0x",
            "-1",
            "12a",
            "0xg1",
            "18446744073709551616",
            "0x1_0000_0000_0000_0000",
        ] {
            let err = bad.parse::<Seed>().expect_err(bad);
            assert_eq!(err.input, bad);
            assert!(err.to_string().contains("not a seed"));
        }
    }

    #[test]
    fn env_value_or_default() {
        assert_eq!(Seed::from_value_or(None, 9), Ok(Seed(9)));
        assert_eq!(Seed::from_value_or(Some(""), 9), Ok(Seed(9)));
        assert_eq!(Seed::from_value_or(Some("  "), 9), Ok(Seed(9)));
        assert_eq!(Seed::from_value_or(Some("0x10"), 9), Ok(Seed(16)));
        assert!(Seed::from_value_or(Some("nope"), 9).is_err());
    }

    #[test]
    fn from_env_or_matches_the_variable() {
        // Read-only: tests run in parallel, so never set the variable here.
        let expected = match std::env::var(SIM_SEED_VAR) {
            Ok(v) if !v.trim().is_empty() => v.parse().expect("SIM_SEED is valid"),
            _ => Seed(5),
        };
        assert_eq!(Seed::from_env_or(5), expected);
    }

    #[test]
    fn derive_is_deterministic_and_distinct() {
        let s = Seed(1);
        assert_eq!(s.derive(3), Seed(1).derive(3));
        assert_ne!(s.derive(0), s);
        let subs: HashSet<Seed> = (0..10_000).map(|i| s.derive(i)).collect();
        assert_eq!(subs.len(), 10_000);
        // Neighbouring seeds do not give neighbouring streams.
        assert_ne!(Seed(1).derive(0), Seed(0).derive(1));
        assert_ne!(Seed(2).derive(0), Seed(1).derive(0));
    }

    #[test]
    fn rng_is_reproducible() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Seed(11).rng();
                move |_| r.random()
            })
            .collect();
        let b: Vec<u64> = {
            let mut r = Seed(11).rng();
            (0..4).map(|_| r.random()).collect()
        };
        assert_eq!(a, b);
        let mut other = Seed(12).rng();
        assert_ne!(a[0], other.random::<u64>());
    }

    #[test]
    fn report_message() {
        let r = SeedReport::new("my_test", &Seed(77));
        assert_eq!(r.seed(), Seed(77));
        assert_eq!(
            r.message(),
            "SIM_SEED=77 reproduces this failure (test my_test)"
        );
    }

    #[test]
    fn report_is_printed_only_on_panic() {
        // Exercise both Drop paths; the message itself goes to stderr.
        drop(SeedReport::new("quiet", &Seed(1)));
        let result = std::panic::catch_unwind(|| {
            let _report = SeedReport::new("loud", &Seed(2));
            panic!("intentional");
        });
        assert!(result.is_err());
    }
}

//! The rules in force and their reload: a rule file is parsed and
//! compiled on the reloading thread, then swapped in whole; workers pick
//! the new set up at their next ring block (one atomic load per block), so
//! no frame waits for a compile and none is dropped for a reload. A file
//! that does not parse leaves the rules in force untouched and says which
//! line is wrong.
//!
//! ```text
//!  SIGHUP ─► reload(): read ─► RuleSet::parse ─► Classifier::compile ─► swap Arc, generation += 1
//!                         └─ error (line N) ─► logged, counted, old rules stay
//!  worker, per block: generation changed? ─► take the new Arc
//! ```

use diodon_filter::rules::{Action, RuleError, RuleSet};
use diodon_filter::Classifier;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A rule file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RuleLoadError {
    /// It could not be read.
    #[error("cannot read rule file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// It does not parse.
    #[error("rule file {path}, {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Which line and why.
        #[source]
        source: RuleError,
    },
}

/// One compiled rule set.
#[derive(Debug)]
pub struct Compiled {
    /// The classifier.
    pub classifier: Classifier,
    /// Which load this is (1 for the first).
    pub generation: u64,
}

/// The rules in force, swappable while workers classify.
#[derive(Debug)]
pub struct RuleBook {
    path: Option<PathBuf>,
    current: Mutex<Arc<Compiled>>,
    generation: AtomicU64,
}

fn load(path: &Path) -> Result<RuleSet, RuleLoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| RuleLoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    RuleSet::parse(&text).map_err(|source| RuleLoadError::Parse {
        path: path.to_owned(),
        source,
    })
}

impl RuleBook {
    /// Loads `path`, or allows everything without one.
    pub fn open(path: Option<&Path>) -> Result<RuleBook, RuleLoadError> {
        let set = match path {
            Some(p) => load(p)?,
            None => RuleSet::default(),
        };
        Ok(RuleBook {
            path: path.map(Path::to_owned),
            current: Mutex::new(Arc::new(Compiled {
                classifier: Classifier::compile(&set),
                generation: 1,
            })),
            generation: AtomicU64::new(1),
        })
    }

    /// Reads, parses and compiles the file again and swaps it in; on any
    /// error the rules in force stay. Returns the number of rules.
    pub fn reload(&self) -> Result<usize, RuleLoadError> {
        let Some(path) = &self.path else {
            return Ok(self.current().classifier.len());
        };
        let set = load(path)?;
        let classifier = Classifier::compile(&set);
        let n = classifier.len();
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        if let Ok(mut cur) = self.current.lock() {
            *cur = Arc::new(Compiled {
                classifier,
                generation,
            });
        }
        self.generation.store(generation, Ordering::Release);
        Ok(n)
    }

    /// The rules in force.
    pub fn current(&self) -> Arc<Compiled> {
        self.current
            .lock()
            .map_or_else(|e| Arc::clone(&e.into_inner()), |c| Arc::clone(&c))
    }

    /// Changes whenever new rules are swapped in.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The default action in force.
    pub fn default_action(&self) -> Action {
        self.current().classifier.default_action()
    }

    /// The rule file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_file_keeps_the_rules_in_force() {
        let dir = std::env::temp_dir().join(format!("diodon-rulebook-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rules");
        std::fs::write(&file, "deny src 10.0.0.1\ndefault allow\n").unwrap();
        let book = RuleBook::open(Some(&file)).unwrap();
        assert_eq!((book.generation(), book.current().classifier.len()), (1, 1));
        std::fs::write(
            &file,
            "deny src 10.0.0.1\ndeny src 10.0.0.2\ndeny sorc 10.0.0.3\n",
        )
        .unwrap();
        let e = book.reload().unwrap_err();
        assert!(
            e.to_string().contains("line 3: unknown field 'sorc'"),
            "{e}"
        );
        assert_eq!((book.generation(), book.current().classifier.len()), (1, 1));
        std::fs::write(
            &file,
            "deny src 10.0.0.1\ndeny src 10.0.0.2\ndefault deny\n",
        )
        .unwrap();
        assert_eq!(book.reload().unwrap(), 2);
        assert_eq!(book.generation(), 2);
        assert_eq!(book.default_action(), Action::Deny);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! The explorer: a deterministic program run once per sequence of its choices.

/// One choice of a path: the option taken, of how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Choice {
    taken: usize,
    of: usize,
}

/// Runs a deterministic program once per sequence of its choices, depth first, until every
/// sequence ran (stateless model checking, as `loom` does for threads).
///
/// The program asks [`Explorer::choose`] whenever it has options — which rank acts next,
/// which channel delivers — and must make the same choices, with the same numbers of
/// options, whenever it is given the same answers: a program that does not is reported.
/// The first path takes option 0 everywhere; each next path changes the last choice that
/// has an untried option and takes option 0 after it.
///
/// ```
/// use starling_std::sim::Explorer;
///
/// // Three ranks acting in every order: 3! paths.
/// let mut orders = Vec::new();
/// let done = Explorer::run(1000, |e| {
///     let mut left = vec![0, 1, 2];
///     let mut order = Vec::new();
///     while !left.is_empty() {
///         order.push(left.remove(e.choose(left.len())));
///     }
///     orders.push(order);
/// });
/// assert_eq!((done.paths, done.complete), (6, true));
/// assert_eq!(orders[0], [0, 1, 2]);
/// assert_eq!(orders[5], [2, 1, 0]);
/// ```
#[derive(Debug, Default)]
pub struct Explorer {
    /// The choices of the current path (those replayed first, then those made).
    trail: Vec<Choice>,
    /// Choices made so far in the current path.
    depth: usize,
    /// Following a given path ([`Explorer::replay`]), whose numbers of options are unknown.
    replaying: bool,
}

/// What [`Explorer::run`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exploration {
    /// Paths run.
    pub paths: u64,
    /// Whether they were all of them (`false`: the limit stopped the exploration first).
    pub complete: bool,
    /// The most choices made in one path.
    pub longest: usize,
}

impl Explorer {
    /// A choice among `options` (at least 1): the option this path takes, in
    /// `0..options`.
    ///
    /// # Panics
    /// When `options` is 0, or when a replayed choice had a different number of options
    /// (the program is not deterministic).
    pub fn choose(&mut self, options: usize) -> usize {
        assert!(options > 0, "a choice needs at least one option");
        let taken = match self.trail.get(self.depth) {
            Some(c) if self.replaying => {
                assert!(
                    c.taken < options,
                    "the replayed path does not fit this program"
                );
                c.taken
            }
            Some(c) => {
                assert_eq!(
                    c.of, options,
                    "choice {} had {} options before and {options} now: the explored \
                     program is not deterministic",
                    self.depth, c.of
                );
                c.taken
            }
            None => {
                self.trail.push(Choice {
                    taken: 0,
                    of: options,
                });
                0
            }
        };
        self.depth += 1;
        taken
    }

    /// The options taken so far in the current path: [`Explorer::replay`] runs it again.
    pub fn path(&self) -> Vec<usize> {
        self.trail[..self.depth].iter().map(|c| c.taken).collect()
    }

    /// Prepares the next path; `false` when every path ran.
    fn advance(&mut self) -> bool {
        self.trail.truncate(self.depth);
        while let Some(last) = self.trail.last_mut() {
            if last.taken + 1 < last.of {
                last.taken += 1;
                self.depth = 0;
                return true;
            }
            self.trail.pop();
        }
        false
    }

    /// Runs `program` once per path, at most `limit` times. A panic in `program` is
    /// re-raised after printing the failing path (for [`Explorer::replay`]).
    pub fn run(limit: u64, mut program: impl FnMut(&mut Self)) -> Exploration {
        let mut e = Self::default();
        let mut done = Exploration {
            paths: 0,
            complete: false,
            longest: 0,
        };
        while done.paths < limit {
            let outcome = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
                program(&mut e);
            }));
            if let Err(panic) = outcome {
                eprintln!(
                    "explored path {} failed; replay it with Explorer::replay(&{:?}, ..)",
                    done.paths,
                    e.path()
                );
                std::panic::resume_unwind(panic);
            }
            done.paths += 1;
            done.longest = done.longest.max(e.depth);
            if !e.advance() {
                done.complete = true;
                break;
            }
        }
        done
    }

    /// Runs `program` once along `path` (a failing path printed by [`Explorer::run`]);
    /// choices beyond it take option 0.
    pub fn replay(path: &[usize], program: impl FnOnce(&mut Self)) {
        let mut e = Self {
            trail: path
                .iter()
                .map(|&taken| Choice {
                    taken,
                    of: usize::MAX,
                })
                .collect(),
            depth: 0,
            replaying: true,
        };
        program(&mut e);
    }
}

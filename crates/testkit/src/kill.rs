//! The random instants of the kill loops (a render, a sync, serve killed at any instant):
//! reproducible from a seed that each loop prints, and that `KALYPSO_KILL_SEED` replays.

/// A small reproducible random sequence (xorshift).
#[derive(Clone, Debug)]
pub struct Random(u64);

impl Random {
    /// The sequence of `seed` (0 is taken as 1: xorshift never leaves 0).
    pub fn new(seed: u64) -> Random {
        Random(seed.max(1))
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The seed of a kill loop: `KALYPSO_KILL_SEED` when set, else `default` (a fixed seed keeps
/// CI's runs alike; `None`: one from the clock, a new sequence each run). Printed, so that a
/// failing run can be replayed.
pub fn kill_seed(default: Option<u64>) -> u64 {
    let seed = std::env::var("KALYPSO_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .or(default)
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 | 1)
        });
    println!("KALYPSO_KILL_SEED={seed}");
    seed
}

//! Where a run's content goes: the one interface between the driver ([`super::run`]) and
//! the front ends' outputs.
//!
//! A [`Sink`] is a folder (`kalypso render`), GitOps branches (`sync`, `serve`, the operator
//! reading git), the operator's publisher, or memory (`validate`, `plan`). Besides taking the
//! content, a sink says what it already has: where its deployment targets are placed (for
//! `Steady` placement) and, through its [`RenderMemo`], which assignments it holds as
//! rendered from unchanged inputs, so that a run renders only what changed. The memo is the
//! one form of incremental rendering: the render cache of a folder, the record of the files
//! delivered to git, and the packages the operator kept in memory all implement it.
//!
//! Implementations do their IO at the edges (the CLI, `kalypso-git`); the ones here keep
//! everything in memory.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;

use super::Run;
use crate::fingerprint::Fingerprint;
use crate::placement::{CurrentAssignment, current_from_folders};
use crate::schedule::Assignment;
use crate::tree::Package;

/// What a sink remembers of its earlier deliveries: which assignments it still has the files
/// of, as rendered from inputs with a given fingerprint. A run does not render those again
/// (it lists them in [`crate::tree::RepoContent::delivered`], and the sink takes their files
/// from what it has).
pub trait RenderMemo: Sync {
    /// Whether the sink has the files of assignment (`cluster_type`, `target`) as rendered
    /// from inputs of fingerprint `fingerprint`, unchanged since.
    fn holds(&self, cluster_type: &str, target: &str, fingerprint: Fingerprint) -> bool;
}

/// No memo: a run renders every assignment.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMemo;

impl RenderMemo for NoMemo {
    fn holds(&self, _: &str, _: &str, _: Fingerprint) -> bool {
        false
    }
}

/// Where a run's content goes, and what is there already. The driver calls, in order:
/// [`Sink::current_assignment`] (only when a policy places targets), [`Sink::begin`],
/// [`Sink::memo`] and [`Sink::writer`] (used from the rendering threads), then
/// [`Sink::deliver`] once.
pub trait Sink {
    /// What a delivery did.
    type Delivered;
    /// Why a delivery failed.
    type Error;

    /// Where the sink has each deployment target now, by cluster type: `Steady` placement
    /// keeps targets there. Asked for at most once per run, only when a policy has placement
    /// fields.
    fn current_assignment(&self) -> CurrentAssignment {
        CurrentAssignment::new()
    }

    /// The cluster types the run writes are known (each gets a folder), nothing is rendered
    /// yet. A sink that fails here keeps the error for [`Sink::deliver`].
    fn begin(&mut self, cluster_types: &BTreeSet<String>) {
        let _ = cluster_types;
    }

    /// What the sink holds of earlier deliveries.
    fn memo(&self) -> &dyn RenderMemo {
        &NoMemo
    }

    /// Where packages go as soon as they are rendered, if the sink writes them then (the run
    /// keeps none of them in its content); `None`: the run's content has them all.
    fn writer(&self) -> Option<&dyn Writer> {
        None
    }

    /// Delivers a finished run: its content ([`Run::content`]), or, when an error blocks the
    /// environment (no content), nothing but the report of its failures. The sink may take
    /// out of the run what it no longer needs (the scheduled environment, the records) to
    /// free memory before the delivery's own work.
    fn deliver(&mut self, run: &mut Run) -> Result<Self::Delivered, Self::Error>;
}

/// Writes packages on the threads that render them, as soon as each is rendered, rather
/// than holding a whole fleet's files in memory until the run ends (`kalypso render` into a
/// new folder).
pub trait Writer: Sync {
    /// Writes the package of `assignment`, rendered from inputs of fingerprint `fingerprint`.
    /// A failure is kept for [`Sink::deliver`].
    fn write(&self, assignment: &Assignment, fingerprint: Fingerprint, package: &Package);
}

/// A sink that keeps the content in memory and delivers nowhere: for commands that only look
/// at the result (`validate`, `plan`, `diff`), with the current assignment they place
/// `Steady` targets against (the `--against` tree), computed only if a policy places.
#[derive(Clone, Copy, Default)]
pub struct Collect<'a> {
    current: Option<&'a (dyn Fn() -> CurrentAssignment + Sync)>,
}

impl std::fmt::Debug for Collect<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collect").finish_non_exhaustive()
    }
}

impl<'a> Collect<'a> {
    /// A sink whose deployment targets are where `current` says.
    pub fn placed(current: &'a (dyn Fn() -> CurrentAssignment + Sync)) -> Collect<'a> {
        Collect {
            current: Some(current),
        }
    }
}

impl Sink for Collect<'_> {
    type Delivered = ();
    type Error = Infallible;

    fn current_assignment(&self) -> CurrentAssignment {
        self.current.map(|current| current()).unwrap_or_default()
    }

    fn deliver(&mut self, _: &mut Run) -> Result<(), Infallible> {
        Ok(())
    }
}

/// A sink that remembers, in memory, the packages of the last run it took with the
/// fingerprints of their inputs, and the placement they had: a process that runs an
/// environment again and again (the operator) renders only what changed, and `Steady`
/// placement keeps targets where its last run put them. After [`Sink::deliver`] the run's
/// content has every package (those not rendered again come from memory) and nothing in
/// [`crate::tree::RepoContent::delivered`].
#[derive(Clone, Debug, Default)]
pub struct InMemory {
    /// By cluster type, then deployment target (nested, so that lookups by `&str` allocate
    /// nothing): the fingerprint and the package.
    packages: HashMap<String, HashMap<String, (Fingerprint, Package)>>,
    /// Where targets are before a first run (read from where the content is delivered).
    placed: CurrentAssignment,
}

impl InMemory {
    /// An empty memory whose deployment targets are where `placed` says until a first run
    /// places them (the operator reads that from the GitOps branch).
    pub fn placed(placed: CurrentAssignment) -> InMemory {
        InMemory {
            placed,
            ..InMemory::default()
        }
    }

    /// Number of packages remembered.
    pub fn len(&self) -> usize {
        self.packages.values().map(HashMap::len).sum()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.packages.values().all(HashMap::is_empty)
    }

    fn get(&self, cluster_type: &str, target: &str) -> Option<&(Fingerprint, Package)> {
        self.packages.get(cluster_type)?.get(target)
    }
}

impl RenderMemo for InMemory {
    fn holds(&self, cluster_type: &str, target: &str, fingerprint: Fingerprint) -> bool {
        self.get(cluster_type, target)
            .is_some_and(|(f, _)| *f == fingerprint)
    }
}

impl Sink for InMemory {
    type Delivered = ();
    type Error = Infallible;

    fn current_assignment(&self) -> CurrentAssignment {
        if self.is_empty() {
            return self.placed.clone();
        }
        current_from_folders(
            self.packages
                .iter()
                .flat_map(|(ct, targets)| targets.keys().map(move |dt| (ct.as_str(), dt.as_str()))),
        )
    }

    fn memo(&self) -> &dyn RenderMemo {
        self
    }

    fn deliver(&mut self, run: &mut Run) -> Result<(), Infallible> {
        if run.is_blocked() {
            return Ok(());
        }
        let rendered = &mut run.rendered;
        let content = &mut rendered.content;
        for key in std::mem::take(&mut content.delivered) {
            if let Some((_, package)) = self.get(&key.0, &key.1) {
                let package = package.clone();
                content.packages.insert(key, package);
            }
        }
        let mut next: HashMap<String, HashMap<String, (Fingerprint, Package)>> = HashMap::new();
        for r in &rendered.records {
            let (ct, dt) = (&r.assignment.cluster_type, &r.assignment.deployment_target);
            if let Some(package) = content.packages.get(&(ct.clone(), dt.clone())) {
                next.entry(ct.clone())
                    .or_default()
                    .insert(dt.clone(), (r.fingerprint, package.clone()));
            }
        }
        // The cluster types the run held keep what was remembered of them.
        for ct in &content.held {
            if let Some(targets) = self.packages.remove(ct) {
                next.insert(ct.clone(), targets);
            }
        }
        self.packages = next;
        self.placed = CurrentAssignment::new();
        Ok(())
    }
}

//! The mass-deletion guard: a delivery that would remove most of an environment's
//! deployment-target folders is held until a person allows it.
//!
//! A control plane that suddenly schedules nothing (a Workload applied without the label
//! that names its workspace, a branch emptied by mistake, a registration pointed at the
//! wrong folder) renders a valid, nearly empty tree; delivered, it deletes every deployment
//! target of the environment from the clusters. The driver ([`super::run`]) compares what
//! the sink holds now ([`super::Sink::current_assignment`]) with the new content and, when
//! the share of folders removed is over the [`DeletionLimit`], blocks the run with a
//! `mass-deletion` error instead of delivering: every front end (sync, serve, the operator)
//! reports it its own way and pushes nothing until the deletion is allowed
//! ([`DeletionGuard::allowed`]).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::placement::CurrentAssignment;
use crate::tree::{RepoContent, Rules};

/// How many deployment-target folders are shown by name in a message.
const SHOWN: usize = 5;

/// When a delivery removes too many of the deployment-target folders the sink holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeletionLimit {
    /// All of them, or more than half of them when there are more than ten.
    #[default]
    Default,
    /// More than this percentage of them (0 to 100; 100 never holds a delivery).
    Percent(u8),
}

impl DeletionLimit {
    /// Whether removing `removed` of `total` folders is over the limit (removing none never
    /// is).
    pub fn exceeded(self, removed: usize, total: usize) -> bool {
        if removed == 0 || total == 0 {
            return false;
        }
        match self {
            DeletionLimit::Default => removed >= total || (total > 10 && removed * 2 > total),
            DeletionLimit::Percent(percent) => removed * 100 > usize::from(percent) * total,
        }
    }
}

impl fmt::Display for DeletionLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeletionLimit::Default => {
                f.write_str("all of them, or more than half when there are more than ten")
            }
            DeletionLimit::Percent(percent) => write!(f, "more than {percent}% of them"),
        }
    }
}

/// Why a limit does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidLimit(pub String);

impl fmt::Display for InvalidLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a mass-deletion limit: give a percentage from 0 to 100 (`50%`) or `default`",
            self.0
        )
    }
}

impl std::error::Error for InvalidLimit {}

impl FromStr for DeletionLimit {
    type Err = InvalidLimit;

    /// `default`, or a percentage: `50%` or `50`.
    fn from_str(text: &str) -> Result<DeletionLimit, InvalidLimit> {
        let trimmed = text.trim();
        if trimmed.eq_ignore_ascii_case("default") {
            return Ok(DeletionLimit::Default);
        }
        let number = trimmed.strip_suffix('%').unwrap_or(trimmed).trim();
        match number.parse::<u8>() {
            Ok(percent) if percent <= 100 => Ok(DeletionLimit::Percent(percent)),
            _ => Err(InvalidLimit(text.to_owned())),
        }
    }
}

/// The guard a front end runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeletionGuard {
    /// When a delivery removes too many folders.
    pub limit: DeletionLimit,
    /// A person allowed this delivery to remove them: it goes ahead, with a warning.
    pub allowed: bool,
    /// How a person allows it in this front end (a sentence ending the message).
    pub how_to_allow: &'static str,
}

impl DeletionGuard {
    /// The default limit, nothing allowed.
    pub fn new(how_to_allow: &'static str) -> DeletionGuard {
        DeletionGuard {
            limit: DeletionLimit::Default,
            allowed: false,
            how_to_allow,
        }
    }
}

/// A delivery that removes more deployment-target folders than the limit allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MassDeletion {
    /// The folders it removes, (cluster type, deployment target), in tree order.
    pub removed: Vec<(String, String)>,
    /// The folders the sink holds now.
    pub total: usize,
    /// The limit it is over.
    pub limit: DeletionLimit,
    /// Whether it was held (else a person allowed it).
    pub held: bool,
}

impl MassDeletion {
    /// One sentence about it, naming the first folders.
    pub fn message(&self, how_to_allow: &str) -> String {
        let mut names: Vec<String> = self
            .removed
            .iter()
            .take(SHOWN)
            .map(|(ct, dt)| format!("{ct}/{dt}"))
            .collect();
        if self.removed.len() > SHOWN {
            names.push(format!("and {} more", self.removed.len() - SHOWN));
        }
        let what = format!(
            "this delivery would remove {} of the {} deployment-target folders the GitOps tree has ({})",
            self.removed.len(),
            self.total,
            names.join(", "),
        );
        if self.held {
            format!(
                "{what}, over the mass-deletion limit ({}): it is held and nothing was delivered. \
                 If the removal is intended, {how_to_allow}",
                self.limit
            )
        } else {
            format!(
                "{what}, over the mass-deletion limit ({}); a person allowed it, so it is delivered",
                self.limit
            )
        }
    }
}

/// The deployment-target folders `current` has that `content` removes, if they are over
/// `limit`.
pub fn check(
    current: &CurrentAssignment,
    content: &RepoContent,
    limit: DeletionLimit,
) -> Option<MassDeletion> {
    let rules = Rules::for_content(content);
    let total = current.values().map(BTreeSet::len).sum();
    // Only the removed folders are sorted: at the M fleet 93,020 folders, nearly all kept.
    let mut removed: Vec<(&str, &str)> = current
        .iter()
        .flat_map(|(dt, cts)| cts.iter().map(move |ct| (ct.as_str(), dt.as_str())))
        .filter(|(ct, dt)| !rules.keeps_folder(ct, dt))
        .collect();
    removed.sort_unstable();
    let removed: Vec<(String, String)> = removed
        .into_iter()
        .map(|(ct, dt)| (ct.to_owned(), dt.to_owned()))
        .collect();
    limit.exceeded(removed.len(), total).then_some(MassDeletion {
        removed,
        total,
        limit,
        held: true,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::placement::current_from_folders;
    use crate::tree::Package;

    #[test]
    fn the_default_limit_is_all_or_more_than_half_of_more_than_ten() {
        let limit = DeletionLimit::Default;
        assert!(!limit.exceeded(0, 0));
        assert!(!limit.exceeded(0, 5));
        assert!(limit.exceeded(1, 1));
        assert!(limit.exceeded(10, 10));
        assert!(!limit.exceeded(9, 10), "ten or fewer: only all of them");
        assert!(limit.exceeded(6, 11));
        assert!(!limit.exceeded(5, 11));
        assert!(!limit.exceeded(50, 100));
        assert!(limit.exceeded(51, 100));
    }

    #[test]
    fn a_percentage_limit() {
        assert_eq!("50%".parse(), Ok(DeletionLimit::Percent(50)));
        assert_eq!(" 20 ".parse(), Ok(DeletionLimit::Percent(20)));
        assert_eq!("Default".parse(), Ok(DeletionLimit::Default));
        assert!("101%".parse::<DeletionLimit>().is_err());
        assert!("half".parse::<DeletionLimit>().is_err());
        assert!(DeletionLimit::Percent(0).exceeded(1, 1000));
        assert!(!DeletionLimit::Percent(100).exceeded(10, 10));
        assert!(DeletionLimit::Percent(20).exceeded(3, 10));
        assert!(!DeletionLimit::Percent(20).exceeded(2, 10));
    }

    fn content(packages: &[(&str, &str)], cluster_types: &[&str]) -> RepoContent {
        RepoContent {
            cluster_types: cluster_types.iter().map(|s| (*s).to_owned()).collect(),
            packages: packages
                .iter()
                .map(|(ct, dt)| (((*ct).to_owned(), (*dt).to_owned()), Package::default()))
                .collect(),
            ..RepoContent::default()
        }
    }

    #[test]
    fn counts_the_folders_the_content_does_not_keep() {
        let current = current_from_folders([("large", "a"), ("large", "b"), ("small", "a")]);
        // Only READMEs: everything goes.
        let empty = content(&[], &["large", "small"]);
        let found = check(&current, &empty, DeletionLimit::Default).expect("held");
        assert_eq!(found.total, 3);
        assert_eq!(
            found.removed,
            [
                ("large".to_owned(), "a".to_owned()),
                ("large".to_owned(), "b".to_owned()),
                ("small".to_owned(), "a".to_owned())
            ]
        );
        let message = found.message("run again with --allow-mass-deletion.");
        assert!(
            message.contains("remove 3 of the 3 deployment-target folders the GitOps tree has"),
            "{message}"
        );
        assert!(message.contains("large/a, large/b, small/a"), "{message}");
        assert!(
            message.ends_with("run again with --allow-mass-deletion."),
            "{message}"
        );

        // Two of three: under the default limit.
        let some = content(&[("large", "a")], &["large", "small"]);
        assert_eq!(check(&current, &some, DeletionLimit::Default), None);
        assert!(check(&current, &some, DeletionLimit::Percent(50)).is_some());

        // A held cluster type keeps its folders.
        let mut held = content(&[], &["small"]);
        held.held = BTreeSet::from(["large".to_owned()]);
        assert_eq!(check(&current, &held, DeletionLimit::Percent(50)), None);

        // Nothing there yet: nothing to remove.
        assert_eq!(
            check(&CurrentAssignment::new(), &empty, DeletionLimit::Default),
            None
        );
    }
}

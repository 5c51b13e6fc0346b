//! The current assignment read from a GitOps folder: where each deployment target is today,
//! for the `Steady` prioritizer of placement (see [`kalypso_core::placement`]).

use std::path::Path;

use kalypso_core::placement::{CurrentAssignment, current_from_folders};

/// The current assignment of a GitOps folder: `<cluster type>/<deployment target>/` folders
/// (dot-folders are not cluster types). A missing folder has none.
pub(crate) fn current_from_dir(out: &Path) -> CurrentAssignment {
    let mut folders = Vec::new();
    let Ok(cluster_types) = std::fs::read_dir(out) else {
        return CurrentAssignment::new();
    };
    for ct in cluster_types.flatten() {
        let name = ct.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !ct.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(targets) = std::fs::read_dir(ct.path()) else {
            continue;
        };
        for dt in targets.flatten() {
            if dt.file_type().is_ok_and(|t| t.is_dir()) {
                folders.push((name.clone(), dt.file_name().to_string_lossy().into_owned()));
            }
        }
    }
    current_from_folders(folders.iter().map(|(ct, dt)| (ct.as_str(), dt.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_assignment_is_the_folder_layout() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for path in [
            "large/app-dev",
            "large/db-dev",
            "small/app-dev",
            ".github/workflows",
        ] {
            std::fs::create_dir_all(dir.path().join(path)).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(dir.path().join("large/README.md"), "x").unwrap_or_else(|e| panic!("{e}"));
        let current = current_from_dir(dir.path());
        let shown: Vec<(String, Vec<String>)> = current
            .into_iter()
            .map(|(dt, cts)| (dt, cts.into_iter().collect()))
            .collect();
        assert_eq!(
            shown,
            [
                ("app-dev".to_owned(), vec!["large".to_owned(), "small".to_owned()]),
                ("db-dev".to_owned(), vec!["large".to_owned()])
            ]
        );
        assert!(current_from_dir(&dir.path().join("missing")).is_empty());
    }
}

//! Repositories built and inspected with the `git` command (the reference implementation),
//! without working trees: files are committed through a temporary index.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `git` in `dir` with a clean, deterministic configuration; returns standard output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_with_env(dir, args, &[], None)
}

fn git_with_env(dir: &Path, args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> String {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .args(["-c", "init.defaultBranch=main", "-c", "core.autocrlf=false"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test Author")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "Test Author")
        .env("GIT_COMMITTER_EMAIL", "author@example.com")
        .env_remove("GIT_DIR")
        .env_remove("GIT_INDEX_FILE")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("git runs");
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Creates a bare repository at `path`.
pub fn init_bare(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    git(path, &["init", "--bare", "-q"]);
}

/// The commit `rev` names in `repo`, or `None`.
pub fn rev_parse(repo: &Path, rev: &str) -> Option<String> {
    let out = Command::new("git")
        .current_dir(repo)
        .args(["rev-parse", "--verify", "-q", &format!("{rev}^{{commit}}")])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

/// Commits on `branch` of `repo` (bare or not; the working tree is never touched): each
/// `(path, Some(content))` is written, each `(path, None)` removed. Creates the branch (from
/// nothing) if needed. Returns the new commit.
pub fn write_files(repo: &Path, branch: &str, files: &[(&str, Option<&str>)], message: &str) -> String {
    let index_dir = tempfile_dir();
    let index = index_dir.join("index");
    let index_str = index.to_str().unwrap();
    let env = [("GIT_INDEX_FILE", index_str)];
    let parent = rev_parse(repo, &format!("refs/heads/{branch}"));
    match &parent {
        Some(p) => {
            git_with_env(repo, &["read-tree", p], &env, None);
        }
        None => {
            git_with_env(repo, &["read-tree", "--empty"], &env, None);
        }
    }
    for (path, content) in files {
        match content {
            Some(text) => {
                let blob = git_with_env(
                    repo,
                    &["hash-object", "-w", "--stdin"],
                    &env,
                    Some(text.as_bytes()),
                );
                let info = format!("100644,{},{path}", blob.trim());
                git_with_env(repo, &["update-index", "--add", "--cacheinfo", &info], &env, None);
            }
            None => {
                // `--force-remove` needs a working tree; mode 0 removes the entry anywhere.
                let info = format!("0 0000000000000000000000000000000000000000\t{path}\n");
                git_with_env(
                    repo,
                    &["update-index", "--index-info"],
                    &env,
                    Some(info.as_bytes()),
                );
            }
        }
    }
    let tree = git_with_env(repo, &["write-tree"], &env, None);
    let mut args = vec!["commit-tree", tree.trim(), "-m", message];
    if let Some(p) = &parent {
        args.extend(["-p", p.as_str()]);
    }
    let commit = git_with_env(repo, &args, &env, None).trim().to_owned();
    git(repo, &["update-ref", &format!("refs/heads/{branch}"), &commit]);
    let _ = std::fs::remove_dir_all(index_dir);
    commit
}

fn tempfile_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "kalypso-git-index-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every file of `branch` in `repo` (path → bytes); empty if the branch does not exist.
pub fn branch_files(repo: &Path, branch: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Some(commit) = rev_parse(repo, &format!("refs/heads/{branch}")) else {
        return out;
    };
    let listing = git(repo, &["ls-tree", "-r", "-z", "--full-tree", &commit]);
    for entry in listing.split('\0').filter(|e| !e.is_empty()) {
        let (meta, path) = entry.split_once('\t').unwrap();
        let blob = meta.split_whitespace().nth(2).unwrap();
        let content = Command::new("git")
            .current_dir(repo)
            .args(["cat-file", "blob", blob])
            .output()
            .unwrap()
            .stdout;
        out.insert(path.to_owned(), content);
    }
    out
}

/// Number of commits reachable from `branch` (0 if it does not exist).
pub fn commit_count(repo: &Path, branch: &str) -> usize {
    match rev_parse(repo, &format!("refs/heads/{branch}")) {
        Some(c) => git(repo, &["rev-list", "--count", &c]).trim().parse().unwrap(),
        None => 0,
    }
}

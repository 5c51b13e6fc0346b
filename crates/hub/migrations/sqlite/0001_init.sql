-- The hub's schema on SQLite. Times are Unix milliseconds; commits are 40-hex ids. The
-- PostgreSQL schema (migrations/postgres) is the same but for identity columns.

-- Each environment of the control plane and where its platform GitOps tree is delivered.
CREATE TABLE environments (
    name TEXT PRIMARY KEY,
    gitops_repo TEXT NOT NULL,
    branch TEXT NOT NULL,
    refreshed_at BIGINT NOT NULL
);

-- The first-parent history of each environment's GitOps branch. `position` is the commit's
-- first-parent depth from the branch's root commit (0), the same for every replica.
CREATE TABLE gitops_commits (
    environment TEXT NOT NULL,
    sha TEXT NOT NULL,
    parent TEXT,
    position BIGINT NOT NULL,
    committed_at BIGINT NOT NULL,
    promoted_commit TEXT,
    PRIMARY KEY (environment, sha)
);
CREATE INDEX gitops_commits_position ON gitops_commits (environment, position);
CREATE INDEX gitops_commits_sha ON gitops_commits (sha);
CREATE INDEX gitops_commits_promoted ON gitops_commits (promoted_commit);

-- What the GitOps tree holds, as intervals of positions: a deployment target on a cluster
-- type (or, with deployment_target = '', the cluster type folder itself) from the commit at
-- from_position until the commit at to_position (exclusive; NULL: still there).
CREATE TABLE placements (
    environment TEXT NOT NULL,
    cluster_type TEXT NOT NULL,
    deployment_target TEXT NOT NULL,
    workload TEXT,
    source TEXT,
    from_position BIGINT NOT NULL,
    from_sha TEXT NOT NULL,
    to_position BIGINT,
    to_sha TEXT,
    PRIMARY KEY (environment, cluster_type, deployment_target, from_position)
);
CREATE INDEX placements_open ON placements (environment, to_position);
CREATE INDEX placements_workload ON placements (workload);

-- Clusters, registered by their first report, with their platform state: the latest report
-- of an applying object (Kustomization, HelmRelease, generic report) whose commit is on the
-- environment's GitOps branch, and that commit's position.
CREATE TABLE clusters (
    id INTEGER PRIMARY KEY,
    environment TEXT NOT NULL,
    name TEXT NOT NULL,
    cluster_type TEXT NOT NULL,
    first_seen BIGINT NOT NULL,
    last_seen BIGINT NOT NULL,
    state TEXT,
    revision TEXT,
    commit_sha TEXT,
    position BIGINT,
    message TEXT,
    reported_at BIGINT,
    since BIGINT,
    UNIQUE (environment, name)
);
CREATE INDEX clusters_type ON clusters (environment, cluster_type);
CREATE INDEX clusters_last_seen ON clusters (last_seen);

-- The latest state of each reporting object of a cluster.
CREATE TABLE latest (
    cluster_id BIGINT NOT NULL,
    object TEXT NOT NULL,
    drives BIGINT NOT NULL,
    state TEXT NOT NULL,
    revision TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    message TEXT NOT NULL,
    reason TEXT NOT NULL,
    event_time BIGINT NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (cluster_id, object)
);
CREATE INDEX latest_commit ON latest (commit_sha);

-- History: one row per state change of a (cluster, object); retries are deduplicated.
CREATE TABLE reports (
    id INTEGER PRIMARY KEY,
    cluster_id BIGINT NOT NULL,
    object TEXT NOT NULL,
    drives BIGINT NOT NULL,
    state TEXT NOT NULL,
    revision TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    message TEXT NOT NULL,
    reason TEXT NOT NULL,
    event_time BIGINT NOT NULL,
    received_at BIGINT NOT NULL,
    UNIQUE (cluster_id, object, event_time, state, commit_sha)
);
CREATE INDEX reports_cluster_time ON reports (cluster_id, event_time);
CREATE INDEX reports_commit ON reports (commit_sha);

-- Promotion policies, approvals, freezes, verification results and the audit log.

-- The PromotionPolicy of each environment's branch, as the last refresh read it: its spec as
-- JSON, and its problems ('' when it is valid). No row: the environment has none.
CREATE TABLE promotion_policies (
    environment TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    problems TEXT NOT NULL,
    read_at BIGINT NOT NULL
);

-- Approvals of a control-plane commit for an environment: one per identity (the same
-- identity approving twice counts once). groups: the identity's group claims, as JSON.
CREATE TABLE approvals (
    environment TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    actor TEXT NOT NULL,
    groups TEXT NOT NULL,
    comment TEXT NOT NULL,
    approved_at BIGINT NOT NULL,
    PRIMARY KEY (environment, commit_sha, actor)
);

-- Freezes: an environment is frozen while a freeze is neither lifted nor past its end.
CREATE TABLE freezes (
    id INTEGER PRIMARY KEY,
    environment TEXT NOT NULL,
    reason TEXT NOT NULL,
    actor TEXT NOT NULL,
    frozen_at BIGINT NOT NULL,
    until_at BIGINT,
    lifted_at BIGINT,
    lifted_by TEXT
);
CREATE INDEX freezes_environment ON freezes (environment, lifted_at);

-- The latest result of each verification check of a promotion (target environment, commit).
CREATE TABLE verifications (
    environment TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    check_name TEXT NOT NULL,
    passed BIGINT NOT NULL,
    message TEXT NOT NULL,
    checked_at BIGINT NOT NULL,
    PRIMARY KEY (environment, commit_sha, check_name)
);

-- The audit log: append-only (the API has no way to change or delete an entry).
CREATE TABLE audit (
    id INTEGER PRIMARY KEY,
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    environment TEXT NOT NULL,
    commit_sha TEXT,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX audit_environment ON audit (environment, id);
CREATE INDEX audit_kind ON audit (kind, id);
CREATE INDEX audit_actor ON audit (actor, id);
CREATE INDEX audit_promotion ON audit (environment, commit_sha, kind);

-- Environments delivered to OCI registries (`oci://` GitOpsRepos): which manifest each
-- cluster type's tag held from one index (a row of gitops_commits, by position) until another
-- (exclusive; NULL: still). A cluster reports its cluster type's manifest digest
-- (`<tag>@sha256:<hex>`); it stands at the last index of the interval holding that digest.
CREATE TABLE oci_artifacts (
    environment TEXT NOT NULL,
    cluster_type TEXT NOT NULL,
    digest TEXT NOT NULL,
    from_position BIGINT NOT NULL,
    to_position BIGINT,
    PRIMARY KEY (environment, cluster_type, from_position)
);
CREATE INDEX oci_artifacts_digest ON oci_artifacts (environment, cluster_type, digest);

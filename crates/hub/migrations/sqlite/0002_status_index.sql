-- The gate and the environment status count an environment's clusters by cluster type and
-- platform state: with every column they read in one index, the count never reads the table.
CREATE INDEX clusters_status ON clusters (environment, cluster_type, state, position, last_seen);

-- Indexes no query needs, maintained on every report: `last_seen` changes with each report,
-- and the history is read by cluster, not by commit.
DROP INDEX clusters_last_seen;
DROP INDEX reports_commit;

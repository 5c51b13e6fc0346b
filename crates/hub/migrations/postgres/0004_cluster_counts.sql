-- Incremental aggregates: the gate, the environment status, the fleet map and the promotions
-- page count clusters from `cluster_counts`, which triggers keep equal to a count of
-- `clusters` in the same transaction as every change of a cluster (whoever makes it: a
-- report, the GitOps refresh, the staleness sweep, a hand edit). The table and its meaning
-- are those of the SQLite schema (migrations/sqlite); here the triggers are statement-level
-- (one upsert of the summed changes per statement, in key order, so that concurrent writers
-- never deadlock on the counters).

ALTER TABLE clusters ADD COLUMN stale BIGINT NOT NULL DEFAULT 0;
ALTER TABLE clusters ADD COLUMN changed_at BIGINT NOT NULL DEFAULT 0;

CREATE TABLE cluster_counts (
    environment TEXT NOT NULL,
    cluster_type TEXT NOT NULL,
    stale BIGINT NOT NULL,
    state TEXT NOT NULL,
    position BIGINT NOT NULL,
    clusters BIGINT NOT NULL,
    left_at BIGINT NOT NULL,
    PRIMARY KEY (environment, cluster_type, stale, state, position)
);

INSERT INTO cluster_counts (environment, cluster_type, stale, state, position, clusters, left_at)
SELECT environment, cluster_type, stale, COALESCE(state, ''), COALESCE(position, -1), COUNT(*), 0
FROM clusters GROUP BY environment, cluster_type, stale, COALESCE(state, ''), COALESCE(position, -1);

-- Adds the changes of one statement on `clusters` to the counts: every moved cluster leaves
-- its old group (at its `changed_at` when the statement set it, else now) and joins its new one.
CREATE FUNCTION cluster_counts_follow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_ms BIGINT := (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cluster_counts AS c (environment, cluster_type, stale, state, position, clusters, left_at)
        SELECT environment, cluster_type, stale, COALESCE(state, ''), COALESCE(position, -1), COUNT(*), 0
        FROM new_rows GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (environment, cluster_type, stale, state, position)
        DO UPDATE SET clusters = c.clusters + excluded.clusters;
    ELSIF TG_OP = 'UPDATE' THEN
        WITH moved AS (
            SELECT o.environment AS o_environment, o.cluster_type AS o_type, o.stale AS o_stale,
                   COALESCE(o.state, '') AS o_state, COALESCE(o.position, -1) AS o_position,
                   n.environment AS n_environment, n.cluster_type AS n_type, n.stale AS n_stale,
                   COALESCE(n.state, '') AS n_state, COALESCE(n.position, -1) AS n_position,
                   CASE WHEN n.changed_at IS DISTINCT FROM o.changed_at THEN n.changed_at ELSE now_ms END AS at
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE (o.environment, o.cluster_type, o.stale, COALESCE(o.state, ''), COALESCE(o.position, -1))
                IS DISTINCT FROM (n.environment, n.cluster_type, n.stale, COALESCE(n.state, ''), COALESCE(n.position, -1))
        ), changes AS (
            SELECT o_environment AS environment, o_type AS cluster_type, o_stale AS stale, o_state AS state,
                   o_position AS position, -1 AS delta, at FROM moved
            UNION ALL
            SELECT n_environment, n_type, n_stale, n_state, n_position, 1, 0 FROM moved
        )
        INSERT INTO cluster_counts AS c (environment, cluster_type, stale, state, position, clusters, left_at)
        SELECT environment, cluster_type, stale, state, position, SUM(delta), MAX(at)
        FROM changes GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (environment, cluster_type, stale, state, position)
        DO UPDATE SET clusters = c.clusters + excluded.clusters, left_at = GREATEST(c.left_at, excluded.left_at);
    ELSE
        INSERT INTO cluster_counts AS c (environment, cluster_type, stale, state, position, clusters, left_at)
        SELECT environment, cluster_type, stale, COALESCE(state, ''), COALESCE(position, -1), -COUNT(*), now_ms
        FROM old_rows GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (environment, cluster_type, stale, state, position)
        DO UPDATE SET clusters = c.clusters + excluded.clusters, left_at = GREATEST(c.left_at, excluded.left_at);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER clusters_counted_insert AFTER INSERT ON clusters
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cluster_counts_follow();
CREATE TRIGGER clusters_counted_update AFTER UPDATE ON clusters
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cluster_counts_follow();
CREATE TRIGGER clusters_counted_delete AFTER DELETE ON clusters
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION cluster_counts_follow();

-- Listing a group's clusters by name: within a cluster type (the cluster-type page), and
-- across the cluster types of an environment (the gate's clusters, the promotions' blockers).
CREATE INDEX clusters_group ON clusters (environment, cluster_type, stale, state, position, name);
CREATE INDEX clusters_environment_group ON clusters (environment, stale, state, position, name);
-- The staleness sweep.
CREATE INDEX clusters_seen ON clusters (stale, last_seen);
-- Clusters without a platform state, which a GitOps refresh looks at again (a report of a commit
-- read later): few, once the hub knows the environments' history.
CREATE INDEX clusters_unapplied ON clusters (environment) WHERE reported_at IS NULL;
DROP INDEX clusters_type;
DROP INDEX clusters_status;

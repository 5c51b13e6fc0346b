-- Incremental aggregates: the gate, the environment status, the fleet map and the promotions
-- page count clusters from `cluster_counts`, which triggers keep equal to a count of
-- `clusters` in the same transaction as every change of a cluster (whoever makes it: a
-- report, the GitOps refresh, the staleness sweep, a hand edit). The PostgreSQL schema
-- (migrations/postgres) keeps the same table with statement-level triggers.

-- Whether the cluster is counted as stale: set by the staleness sweep once it has been silent
-- for longer than --stale-after, cleared by its next report. (Readers correct the counts for
-- clusters whose silence crossed the limit since the last sweep.)
ALTER TABLE clusters ADD COLUMN stale BIGINT NOT NULL DEFAULT 0;
-- When the cluster last moved between groups, as the writer that moved it says (a report: its
-- time of receipt; the sweep: the moment it became stale). The triggers record it as the time
-- the cluster left its group; a change that does not set it (a hand edit) is recorded at the
-- database's clock.
ALTER TABLE clusters ADD COLUMN changed_at BIGINT NOT NULL DEFAULT 0;

-- Clusters per group: environment, cluster type, stale flag, platform state ('' for none)
-- and platform commit position (-1 for none). Relative to any commit at position p a group is
-- wholly compliant, failed, reconciling, behind or stale, so the counts for any commit, not
-- only the head, are a sum over a few hundred rows.
--
-- `left_at` is the last time a cluster left the group. For a gate over cluster types S and a
-- commit at p, the groups that block it are the fresh non-compliant ones and the fresh
-- compliant ones below p; when none holds a cluster, the gate has been compliant since the
-- latest `left_at` among them (the moment the last blocking cluster stopped blocking). Empty
-- groups are kept for that (the sweep folds and prunes the ones no answer needs).
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

CREATE TRIGGER clusters_counted_insert AFTER INSERT ON clusters
BEGIN
    INSERT INTO cluster_counts (environment, cluster_type, stale, state, position, clusters, left_at)
    VALUES (NEW.environment, NEW.cluster_type, NEW.stale, COALESCE(NEW.state, ''), COALESCE(NEW.position, -1), 1, 0)
    ON CONFLICT (environment, cluster_type, stale, state, position) DO UPDATE SET clusters = clusters + 1;
END;

CREATE TRIGGER clusters_counted_update AFTER UPDATE OF environment, cluster_type, stale, state, position ON clusters
WHEN OLD.environment IS NOT NEW.environment OR OLD.cluster_type IS NOT NEW.cluster_type
    OR OLD.stale IS NOT NEW.stale OR COALESCE(OLD.state, '') IS NOT COALESCE(NEW.state, '')
    OR COALESCE(OLD.position, -1) IS NOT COALESCE(NEW.position, -1)
BEGIN
    UPDATE cluster_counts SET clusters = clusters - 1,
        left_at = MAX(left_at, CASE WHEN NEW.changed_at IS NOT OLD.changed_at THEN NEW.changed_at
                                    ELSE CAST(unixepoch('subsec') * 1000 AS INTEGER) END)
    WHERE environment = OLD.environment AND cluster_type = OLD.cluster_type AND stale = OLD.stale
        AND state = COALESCE(OLD.state, '') AND position = COALESCE(OLD.position, -1);
    INSERT INTO cluster_counts (environment, cluster_type, stale, state, position, clusters, left_at)
    VALUES (NEW.environment, NEW.cluster_type, NEW.stale, COALESCE(NEW.state, ''), COALESCE(NEW.position, -1), 1, 0)
    ON CONFLICT (environment, cluster_type, stale, state, position) DO UPDATE SET clusters = clusters + 1;
END;

CREATE TRIGGER clusters_counted_delete AFTER DELETE ON clusters
BEGIN
    UPDATE cluster_counts SET clusters = clusters - 1,
        left_at = MAX(left_at, CAST(unixepoch('subsec') * 1000 AS INTEGER))
    WHERE environment = OLD.environment AND cluster_type = OLD.cluster_type AND stale = OLD.stale
        AND state = COALESCE(OLD.state, '') AND position = COALESCE(OLD.position, -1);
END;

-- Listing a group's clusters by name: within a cluster type (the cluster-type page), and
-- across the cluster types of an environment (the gate's clusters, the promotions' blockers).
-- A page is a merge of a few such ranges, one per group, each stopped after the page's size.
CREATE INDEX clusters_group ON clusters (environment, cluster_type, stale, state, position, name);
CREATE INDEX clusters_environment_group ON clusters (environment, stale, state, position, name);
-- The staleness sweep: clusters silent for longer than the limit and not yet counted stale
-- (and, after --stale-after grew, stale ones that are not any more).
CREATE INDEX clusters_seen ON clusters (stale, last_seen);
-- Clusters without a platform state, which a GitOps refresh looks at again (a report of a commit
-- read later): few, once the hub knows the environments' history.
CREATE INDEX clusters_unapplied ON clusters (environment) WHERE reported_at IS NULL;
-- Both are prefixes of clusters_group, or need nothing but it.
DROP INDEX clusters_type;
DROP INDEX clusters_status;

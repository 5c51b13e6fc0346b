-- A GitOps branch can be rewound (reset to an older commit, force-pushed with another
-- history). `gitops_commits` then holds the branch's first-parent history as it is now, and the
-- commits the branch no longer has move here, keeping their positions: a position is never
-- given to two commits (the unique index below), so a report of an abandoned commit, or a
-- position remembered for it, can never be taken for a commit of the branch. A commit the
-- branch comes back to moves back with its position.
CREATE TABLE gitops_abandoned (
    environment TEXT NOT NULL,
    sha TEXT NOT NULL,
    position BIGINT NOT NULL,
    abandoned_at BIGINT NOT NULL,
    PRIMARY KEY (environment, sha)
);

-- How many times each environment's branch was found rewound: the dashboard's version (which
-- otherwise counts rows that only grow) changes with it, since a rewind removes rows.
ALTER TABLE environments ADD COLUMN rewinds BIGINT NOT NULL DEFAULT 0;

-- Earlier versions gave the commits after a rewind the positions of the abandoned ones (two
-- commits at one position, intervals of both histories mixed). Such an environment's stored
-- history is forgotten and read again from its branch by the next refresh; its clusters'
-- platform states are set again from their latest reports then.
DELETE FROM placements WHERE environment IN
    (SELECT environment FROM gitops_commits GROUP BY environment, position HAVING COUNT(*) > 1);
DELETE FROM oci_artifacts WHERE environment IN
    (SELECT environment FROM gitops_commits GROUP BY environment, position HAVING COUNT(*) > 1);
UPDATE clusters SET state = NULL, revision = NULL, commit_sha = NULL, position = NULL, message = NULL,
    reported_at = NULL, since = NULL
WHERE environment IN
    (SELECT environment FROM gitops_commits GROUP BY environment, position HAVING COUNT(*) > 1);
DELETE FROM gitops_commits WHERE environment IN
    (SELECT environment FROM gitops_commits GROUP BY environment, position HAVING COUNT(*) > 1);

DROP INDEX gitops_commits_position;
CREATE UNIQUE INDEX gitops_commits_position ON gitops_commits (environment, position);

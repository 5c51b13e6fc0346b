-- The status of the progressive rollout a GitOps commit carries (its
-- `.github/tracking/Rollout_State`: progressing, paused, complete, halted, rolled-back; NULL:
-- none, the commit delivered every cluster type). The gate counts a commit a rollout brought
-- as run only from the first commit on whose rollout is complete.
ALTER TABLE gitops_commits ADD COLUMN rollout_status TEXT;

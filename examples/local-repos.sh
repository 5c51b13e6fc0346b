#!/bin/sh
# Turns the bundled example (examples/control-plane) into the git repositories the seeds'
# tutorial creates on GitHub, as bare repositories on this machine:
#
#   DEST/control-plane.git  branches main, dev and stage (dev and stage pin main's commit)
#   DEST/app-src.git        the application team's Workload (hello-world-app)
#   DEST/svc-src.git        the platform team's services (platform-svc)
#   DEST/gitops.git         the platform GitOps repository, empty
#
# The GitHub URLs in the example are rewritten to file:// URLs of these repositories, so that
# `kalypso sync`, `promote`, `check-promote` and `hub` run the whole promotion flow offline.
# Usage: examples/local-repos.sh DEST
set -eu
dest=${1:?usage: local-repos.sh DEST}
example=$(cd "$(dirname "$0")/control-plane" && pwd)
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
export GIT_AUTHOR_NAME=Example GIT_AUTHOR_EMAIL=example@example.com
export GIT_COMMITTER_NAME=Example GIT_COMMITTER_EMAIL=example@example.com

# publish BARE BRANCH FOLDER: commits FOLDER's files as the only content of BRANCH.
publish() {
  work=$(mktemp -d)
  git -C "$work" init -q -b "$2"
  cp -R "$3/." "$work/"
  git -C "$work" add -A
  git -C "$work" commit -q -m "$2: the example's content"
  git -C "$work" push -q "$1" "HEAD:refs/heads/$2"
  rm -rf "$work"
}

for repo in control-plane app-src svc-src gitops; do
  rm -rf "$dest/$repo.git"
  git init -q --bare --initial-branch=main "$dest/$repo.git"
done

stage=$(mktemp -d)
mkdir -p "$stage/app/workload" "$stage/svc/workloads"
cp -R "$example/workloads/hello-world-app/." "$stage/app/workload/"
cp -R "$example/workloads/platform-svc/." "$stage/svc/workloads/"
publish "$dest/app-src.git" main "$stage/app"
publish "$dest/svc-src.git" main "$stage/svc"

cp -R "$example/main" "$stage/main"
sed -i "s#https://github.com/contoso/kalypso-app-src#file://$dest/app-src.git#" "$stage/main/workloads/hello-world-app.yaml"
sed -i "s#https://github.com/contoso/kalypso-svc-src#file://$dest/svc-src.git#" "$stage/main/workloads/platform-svc.yaml"
publish "$dest/control-plane.git" main "$stage/main"
main_commit=$(git -C "$dest/control-plane.git" rev-parse main)

for env in dev stage; do
  cp -R "$example/$env" "$stage/$env"
  sed -i "s#https://github.com/contoso/kalypso-gitops#file://$dest/gitops.git#" "$stage/$env/gitops-repo.yaml"
  sed -i "s#^\( *commit:\).*#\1 $main_commit#" "$stage/$env/base-repo.yaml"
  publish "$dest/control-plane.git" "$env" "$stage/$env"
done
rm -rf "$stage"
echo "control plane: $dest/control-plane.git (main $main_commit)"

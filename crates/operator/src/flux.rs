//! The Flux objects that bring control-plane content into environment namespaces.
//!
//! Like the original, the operator does not read git itself in its default mode: for each
//! Environment it creates a Flux `GitRepository` and `Kustomization` named `<env>` in
//! `flux-system` (environment branch → namespace `<env>`), for each BaseRepo and
//! WorkloadRegistration a pair named `<namespace>-<name>` (main branch pinned at the
//! promoted commit, workload folders → the environment namespace). Interval 10 s, prune,
//! secret `gh-repo-secret`: the original's settings, so that an upgrade from it finds its
//! objects already in the state the operator wants.
//!
//! [`git_repository`] and [`kustomization`] build the objects (pure); [`apply`] and
//! [`delete`] write them with server-side apply and delete them.

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::plan::MANAGED_BY;

/// Where and how Flux objects are made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FluxSettings {
    /// The namespace of the Flux objects (`flux-system`).
    pub namespace: String,
    /// The secret with git credentials (`gh-repo-secret`); `None`: public repositories.
    pub secret: Option<String>,
    /// The reconcile interval (`10s`).
    pub interval: String,
    /// `apiVersion` of GitRepository.
    pub source_api_version: String,
    /// `apiVersion` of Kustomization.
    pub kustomize_api_version: String,
}

impl Default for FluxSettings {
    fn default() -> FluxSettings {
        FluxSettings {
            namespace: "flux-system".to_owned(),
            secret: Some("gh-repo-secret".to_owned()),
            interval: "10s".to_owned(),
            source_api_version: "source.toolkit.fluxcd.io/v1".to_owned(),
            kustomize_api_version: "kustomize.toolkit.fluxcd.io/v1".to_owned(),
        }
    }
}

/// One git source and where Flux applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FluxSource {
    /// Name of both Flux objects.
    pub name: String,
    /// Repository URL.
    pub url: String,
    /// Branch.
    pub branch: String,
    /// Pinned commit (BaseRepo `spec.commit`), if any.
    pub commit: Option<String>,
    /// Path inside the repository.
    pub path: String,
    /// The namespace objects are applied into.
    pub target_namespace: String,
}

/// Why a Flux object could not be written or removed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused to apply it.
    #[error("cannot apply Flux {kind} {namespace}/{name}: {source}")]
    Apply {
        /// `GitRepository` or `Kustomization`.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server refused to delete it.
    #[error("cannot delete Flux {kind} {namespace}/{name}: {source}")]
    Delete {
        /// `GitRepository` or `Kustomization`.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The GitRepository resource.
pub fn git_repository_resource(settings: &FluxSettings) -> ApiResource {
    resource(&settings.source_api_version, "GitRepository", "gitrepositories")
}

/// The Kustomization resource.
pub fn kustomization_resource(settings: &FluxSettings) -> ApiResource {
    resource(&settings.kustomize_api_version, "Kustomization", "kustomizations")
}

fn object(
    resource: &ApiResource,
    settings: &FluxSettings,
    name: &str,
    spec: serde_json::Value,
) -> DynamicObject {
    let mut o = DynamicObject::new(name, resource).within(&settings.namespace);
    o.metadata.labels = Some([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())].into());
    o.data = json!({ "spec": spec });
    o
}

/// The GitRepository of `source`.
pub fn git_repository(settings: &FluxSettings, source: &FluxSource) -> DynamicObject {
    let mut reference = json!({ "branch": source.branch });
    if let Some(commit) = source.commit.as_deref().filter(|c| !c.is_empty()) {
        reference["commit"] = json!(commit);
    }
    let mut spec = json!({
        "url": source.url,
        "ref": reference,
        "interval": settings.interval,
    });
    if let Some(secret) = &settings.secret {
        spec["secretRef"] = json!({ "name": secret });
    }
    object(&git_repository_resource(settings), settings, &source.name, spec)
}

/// The Kustomization of `source`.
pub fn kustomization(settings: &FluxSettings, source: &FluxSource) -> DynamicObject {
    let spec = json!({
        "path": source.path,
        "prune": true,
        "interval": settings.interval,
        "sourceRef": { "kind": "GitRepository", "name": source.name },
        "targetNamespace": source.target_namespace,
    });
    object(&kustomization_resource(settings), settings, &source.name, spec)
}

/// Creates or updates both objects of `source` (server-side apply, field manager
/// `kalypso-scheduler`, forced: the operator owns these objects).
pub async fn apply(client: &Client, settings: &FluxSettings, source: &FluxSource) -> Result<(), Error> {
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    for (kind, resource, obj) in [
        (
            "GitRepository",
            git_repository_resource(settings),
            git_repository(settings, source),
        ),
        (
            "Kustomization",
            kustomization_resource(settings),
            kustomization(settings, source),
        ),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &settings.namespace, &resource);
        api.patch(&source.name, &params, &Patch::Apply(&obj))
            .await
            .map_err(|e| Error::Apply {
                kind,
                namespace: settings.namespace.clone(),
                name: source.name.clone(),
                source: e,
            })?;
    }
    Ok(())
}

/// Deletes both objects named `name` (Kustomization first, as the original); objects that
/// are already gone are fine.
pub async fn delete(client: &Client, settings: &FluxSettings, name: &str) -> Result<(), Error> {
    for (kind, resource) in [
        ("Kustomization", kustomization_resource(settings)),
        ("GitRepository", git_repository_resource(settings)),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &settings.namespace, &resource);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(Error::Delete {
                    kind,
                    namespace: settings.namespace.clone(),
                    name: name.to_owned(),
                    source: e,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(commit: Option<&str>) -> FluxSource {
        FluxSource {
            name: "dev-main".into(),
            url: "https://github.com/org/control-plane".into(),
            branch: "main".into(),
            commit: commit.map(str::to_owned),
            path: "./templates".into(),
            target_namespace: "dev".into(),
        }
    }

    #[test]
    fn objects_have_the_originals_settings() {
        let s = FluxSettings::default();
        let repo = serde_json::to_value(git_repository(&s, &source(Some("abc")))).expect("json");
        assert_eq!(repo["apiVersion"], "source.toolkit.fluxcd.io/v1");
        assert_eq!(repo["kind"], "GitRepository");
        assert_eq!(repo["metadata"]["namespace"], "flux-system");
        assert_eq!(repo["spec"]["interval"], "10s");
        assert_eq!(repo["spec"]["ref"], json!({"branch": "main", "commit": "abc"}));
        assert_eq!(repo["spec"]["secretRef"]["name"], "gh-repo-secret");
        let k = serde_json::to_value(kustomization(&s, &source(None))).expect("json");
        assert_eq!(k["kind"], "Kustomization");
        assert_eq!(k["spec"]["prune"], true);
        assert_eq!(k["spec"]["targetNamespace"], "dev");
        assert_eq!(
            k["spec"]["sourceRef"],
            json!({"kind": "GitRepository", "name": "dev-main"})
        );
    }

    #[test]
    fn unpinned_sources_follow_the_branch_and_public_ones_have_no_secret() {
        let s = FluxSettings {
            secret: None,
            source_api_version: "source.toolkit.fluxcd.io/v1beta2".into(),
            ..FluxSettings::default()
        };
        let repo = serde_json::to_value(git_repository(&s, &source(Some("")))).expect("json");
        assert_eq!(repo["spec"]["ref"], json!({"branch": "main"}));
        assert!(repo["spec"].get("secretRef").is_none());
        assert_eq!(repo["apiVersion"], "source.toolkit.fluxcd.io/v1beta2");
        assert_eq!(git_repository_resource(&s).plural, "gitrepositories");
    }
}

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
//!
//! API versions: the original creates `v1beta2` GitRepositories and Kustomizations. With
//! [`AUTO`] (the default) the operator asks the cluster which versions it serves
//! ([`resolve_api_versions`]) and creates the original's when they are served, so that
//! `kubectl get` and tools reading the objects see what they saw before; a cluster whose Flux
//! no longer serves `v1beta2` gets the preferred served version, with a warning. A cluster
//! without Flux is an error at start, naming the missing API group.

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::desired::MANAGED_BY;

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
            source_api_version: AUTO.to_owned(),
            kustomize_api_version: AUTO.to_owned(),
        }
    }
}

/// An API version setting meaning "the original's version when the cluster serves it, else
/// the cluster's preferred one" ([`resolve_api_versions`]).
pub const AUTO: &str = "auto";

/// The API group of GitRepository.
pub const SOURCE_GROUP: &str = "source.toolkit.fluxcd.io";

/// The API group of Kustomization.
pub const KUSTOMIZE_GROUP: &str = "kustomize.toolkit.fluxcd.io";

/// The version of both groups the original scheduler creates (its `controllers/flux.go`
/// imports `source-controller/api/v1beta2` and `kustomize-controller/api/v1beta2`).
pub const ORIGINAL_VERSION: &str = "v1beta2";

/// What a cluster serves of one API group: its versions and the preferred one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServedGroup {
    /// Every served version (`v1`, `v1beta2`...).
    pub versions: Vec<String>,
    /// The preferred version, if the server names one.
    pub preferred: Option<String>,
}

/// Chooses the `apiVersion` (`group/version`) for `group` from a setting and what the cluster
/// serves (`None`: the group is not served at all). Returns the choice and, when it is not
/// the original's, a warning saying so. Pure, so that every case is tested without a cluster.
pub fn choose_api_version(
    setting: &str,
    group: &str,
    served: Option<&ServedGroup>,
) -> Result<(String, Option<String>), String> {
    if setting != AUTO {
        return Ok((setting.to_owned(), None));
    }
    let Some(served) = served.filter(|s| !s.versions.is_empty()) else {
        return Err(format!(
            "the cluster does not serve the API group {group}: is Flux installed? \
             (install Flux, or run the operator with --source external or --source git)"
        ));
    };
    if served.versions.iter().any(|v| v == ORIGINAL_VERSION) {
        return Ok((format!("{group}/{ORIGINAL_VERSION}"), None));
    }
    let version = served
        .preferred
        .clone()
        .filter(|p| served.versions.contains(p))
        .unwrap_or_else(|| served.versions[0].clone());
    let warning = format!(
        "the cluster's Flux does not serve {group}/{ORIGINAL_VERSION}, the version the original \
         scheduler creates; creating {group}/{version} objects instead (same fields; tools that \
         read {ORIGINAL_VERSION} objects must read {version})"
    );
    Ok((format!("{group}/{version}"), Some(warning)))
}

/// Asks the API server what it serves of `group` (`GET /apis/<group>`); `None` when it does
/// not serve the group at all.
pub async fn served_group(client: &Client, group: &str) -> Result<Option<ServedGroup>, kube::Error> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
    let request = http::Request::get(format!("/apis/{group}"))
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    match client.request::<APIGroup>(request).await {
        Ok(found) => Ok(Some(ServedGroup {
            versions: found.versions.into_iter().map(|v| v.version).collect(),
            preferred: found.preferred_version.map(|v| v.version),
        })),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces [`AUTO`] API versions in `settings` by what the cluster serves (see
/// [`choose_api_version`]); logs the warning when a version other than the original's is
/// used. Settings without `auto` are returned unchanged, without asking the cluster.
pub async fn resolve_api_versions(client: &Client, settings: &FluxSettings) -> Result<FluxSettings, String> {
    let mut resolved = settings.clone();
    for (group, version) in [
        (SOURCE_GROUP, &mut resolved.source_api_version),
        (KUSTOMIZE_GROUP, &mut resolved.kustomize_api_version),
    ] {
        if version != AUTO {
            continue;
        }
        let served = served_group(client, group)
            .await
            .map_err(|e| format!("cannot ask the cluster which versions of {group} it serves: {e}"))?;
        let (chosen, warning) = choose_api_version(version, group, served.as_ref())?;
        if let Some(warning) = warning {
            tracing::warn!("{warning}");
        }
        tracing::info!(api_version = %chosen, "Flux objects of {group}");
        *version = chosen;
    }
    Ok(resolved)
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
    fn the_originals_version_is_chosen_when_served() {
        let both = ServedGroup {
            versions: vec!["v1".into(), "v1beta2".into(), "v1beta1".into()],
            preferred: Some("v1".into()),
        };
        assert_eq!(
            choose_api_version(AUTO, SOURCE_GROUP, Some(&both)),
            Ok(("source.toolkit.fluxcd.io/v1beta2".to_owned(), None))
        );
        let v1_only = ServedGroup {
            versions: vec!["v1".into()],
            preferred: Some("v1".into()),
        };
        let (chosen, warning) = choose_api_version(AUTO, KUSTOMIZE_GROUP, Some(&v1_only)).unwrap();
        assert_eq!(chosen, "kustomize.toolkit.fluxcd.io/v1");
        assert!(
            warning
                .unwrap()
                .contains("does not serve kustomize.toolkit.fluxcd.io/v1beta2")
        );
        let error = choose_api_version(AUTO, SOURCE_GROUP, None).unwrap_err();
        assert!(
            error.contains("does not serve the API group source.toolkit.fluxcd.io"),
            "{error}"
        );
        assert!(choose_api_version(AUTO, SOURCE_GROUP, Some(&ServedGroup::default())).is_err());
        // An explicit setting is taken as it is, without asking.
        assert_eq!(
            choose_api_version("source.toolkit.fluxcd.io/v1", SOURCE_GROUP, None),
            Ok(("source.toolkit.fluxcd.io/v1".to_owned(), None))
        );
    }

    #[tokio::test]
    async fn served_versions_are_discovered_from_the_api_server() {
        use crate::fixtures::mock_client;
        let (client, mut server) = mock_client();
        let settings = FluxSettings::default();
        let asking = tokio::spawn(async move { resolve_api_versions(&client, &settings).await });
        server
            .expect_ok_with(
                "GET",
                "/apis/source.toolkit.fluxcd.io",
                &json!({"kind": "APIGroup", "apiVersion": "v1", "name": "source.toolkit.fluxcd.io",
                    "versions": [{"groupVersion": "source.toolkit.fluxcd.io/v1", "version": "v1"},
                                 {"groupVersion": "source.toolkit.fluxcd.io/v1beta2", "version": "v1beta2"}],
                    "preferredVersion": {"groupVersion": "source.toolkit.fluxcd.io/v1", "version": "v1"}}),
            )
            .await;
        server
            .expect_ok_with(
                "GET",
                "/apis/kustomize.toolkit.fluxcd.io",
                &json!({"kind": "APIGroup", "apiVersion": "v1", "name": "kustomize.toolkit.fluxcd.io",
                    "versions": [{"groupVersion": "kustomize.toolkit.fluxcd.io/v1", "version": "v1"}],
                    "preferredVersion": {"groupVersion": "kustomize.toolkit.fluxcd.io/v1", "version": "v1"}}),
            )
            .await;
        let resolved = asking.await.unwrap().unwrap();
        assert_eq!(resolved.source_api_version, "source.toolkit.fluxcd.io/v1beta2");
        assert_eq!(resolved.kustomize_api_version, "kustomize.toolkit.fluxcd.io/v1");
        server.expect_nothing_more().await;

        let (client, mut server) = mock_client();
        let asking =
            tokio::spawn(async move { resolve_api_versions(&client, &FluxSettings::default()).await });
        server
            .expect_error("GET", "/apis/source.toolkit.fluxcd.io", 404, "NotFound")
            .await;
        let error = asking.await.unwrap().unwrap_err();
        assert!(error.contains("is Flux installed?"), "{error}");
    }

    #[test]
    fn objects_have_the_originals_settings() {
        let s = FluxSettings {
            source_api_version: "source.toolkit.fluxcd.io/v1".into(),
            kustomize_api_version: "kustomize.toolkit.fluxcd.io/v1".into(),
            ..FluxSettings::default()
        };
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

"""`servelab deploy`: Ray Serve replicas and autoscaling per model, the Kubernetes manifests."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

__all__ = ["AutoscalingSettings", "DeploySettings", "KubernetesSettings", "ModelDeploySettings"]


class AutoscalingSettings(BaseModel):
    """Ray Serve autoscaling of one model's replicas (its ``autoscaling_config``)."""

    min_replicas: int = Field(1, ge=0, description="Fewest replicas (0 lets an idle model scale to none).")
    max_replicas: int = Field(2, ge=1, description="Most replicas.")
    target_ongoing_requests: float | None = Field(
        None, gt=0, description="Requests in flight per replica that autoscaling aims at; unset = one full "
        "batch per instance (max_batch_size x instances, at least 1).",
    )

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingSettings:
        _check_replicas("autoscaling", self.min_replicas, self.max_replicas)
        return self


class ModelDeploySettings(BaseModel):
    """How one model is spread over machines; unset fields come from its config.pbtxt."""

    num_replicas: int | None = Field(None, ge=1, description="Fixed replica count (ignored when autoscaling is set).")
    autoscaling: AutoscalingSettings | None = Field(None, description="Scale between min and max replicas.")
    max_ongoing_requests: int | None = Field(
        None, ge=1, description="Requests one replica takes at once; unset = two full batches per instance, at least 16."
    )


class KubernetesSettings(BaseModel):
    """What `servelab deploy k8s` writes into the manifests."""

    namespace: str = Field("servelab", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Namespace of every object.")
    name: str = Field("servelab", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Name of the Deployment, Service, ...")
    image: str = Field("servelab:0.1.0", min_length=1, description="Container image built from deploy/Dockerfile.")
    min_replicas: int = Field(1, ge=1, description="HorizontalPodAutoscaler minReplicas.")
    max_replicas: int = Field(4, ge=1, description="HorizontalPodAutoscaler maxReplicas.")
    target_pending_requests: float = Field(
        8.0, gt=0, description="Queued requests per pod (nv_inference_pending_request_count) the HPA aims at."
    )
    storage_uri: str = Field(
        "pvc://servelab-models/repository", min_length=1,
        description="KServe InferenceService storageUri: where KServe fetches the model repository from.",
    )
    cpu: str = Field("2", description="CPU request and limit of a pod.")
    memory: str = Field("4Gi", description="Memory request and limit of a pod.")

    @model_validator(mode="after")
    def _ordered(self) -> KubernetesSettings:
        _check_replicas("kubernetes", self.min_replicas, self.max_replicas)
        return self


class DeploySettings(BaseModel):
    """`servelab deploy`: Ray Serve replicas per model and the Kubernetes manifests."""

    instances_as_replicas: bool = Field(
        False, description="Ray: a model's instance_group count becomes its replica count, one instance per "
        "replica (spread over machines); off = every replica runs the instance groups as written.",
    )
    num_replicas: int = Field(1, ge=1, description="Ray: replicas of a model that neither models.<m> nor its instance groups size.")
    cpus_per_instance: float = Field(1.0, ge=0, description="Ray: logical CPUs a replica reserves per KIND_CPU instance.")
    models: dict[str, ModelDeploySettings] = Field(default_factory=dict, description="Ray: per-model overrides.")
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)


def _check_replicas(section: str, low: int, high: int) -> None:
    """A replica range must not be upside down (autoscaling and the Kubernetes HPA share the rule)."""
    if high < low:
        raise ValueError(f"{section}.max_replicas ({high}) is below {section}.min_replicas ({low})")

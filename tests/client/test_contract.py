"""The wire contract's values as the Kubeflow Trainer defines them.

The one place the suite spells them out: every other test, the server and the
development cluster read them from ``trainjob_status.contract``, so a typo there would
agree with itself everywhere else.
"""

from __future__ import annotations

from trainjob_status import contract


def test_the_contract_matches_the_kubeflow_trainer() -> None:
    assert contract.status_path("team-a", "job1") == (
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/job1/status"
    )
    assert contract.audience("team-a", "job1") == (
        "trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/job1/status"
    )
    assert contract.ENV_NAMES == (
        "KUBEFLOW_TRAINER_SERVER_URL",
        "KUBEFLOW_TRAINER_SERVER_CA_CERT",
        "KUBEFLOW_TRAINER_SERVER_TOKEN",
    )
    assert contract.JOBSET_NAME_LABEL == "jobset.sigs.k8s.io/jobset-name"
    assert contract.ANCESTOR_STEP_LABEL == "trainer.kubeflow.org/trainjob-ancestor-step"
    assert (contract.GROUP, contract.VERSION, contract.RESOURCE, contract.KIND) == (
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        "TrainJob",
    )
    assert (contract.MAX_METRICS, contract.MAX_METRIC_CHARS) == (256, 64)
    assert (contract.MAX_PROGRESS_PERCENT, contract.INT32_MAX) == (100, 2147483647)

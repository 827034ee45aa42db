"""Issue 53: a small backend core, and capabilities a backend declares and the front ends ask for
by type. Each backend that declares a capability has every one of its methods; a backend without
one says so in the capability's own words; the core holds nothing only some backends do."""

from __future__ import annotations

import inspect

import pytest

from torchdeck.backends.base import Backend
from torchdeck.backends.capabilities import CAPABILITIES, BudgetChange, CifarTasks, HealthGate, NodeCordon
from torchdeck.backends.errors import BackendError
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.local import LocalBackend

BACKENDS = (LocalBackend, KubernetesBackend)


def methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if inspect.isfunction(value) and not name.startswith("_")}


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_a_backend_that_declares_a_capability_has_every_method_of_it(backend: type) -> None:
    declared = [c for c in CAPABILITIES if issubclass(backend, c)]
    assert declared, backend
    for capability in declared:
        for name in methods(capability):
            if getattr(capability, name).__code__.co_names[-1:] != ("NotImplementedError",):
                continue  # a capability's own default (fetch_model's) serves every backend that has it
            mine = next(c for c in backend.__mro__ if name in vars(c))
            assert mine is not capability, f"{backend.__name__} declares {capability.__name__} without {name}"


def test_the_backends_declare_what_they_do() -> None:
    assert {c.__name__ for c in CAPABILITIES if issubclass(LocalBackend, c)} == {
        "HealthGate", "NodeMeasures", "CifarTasks", "HangTriage", "BudgetChange"
    }  # fmt: skip
    assert {c.__name__ for c in CAPABILITIES if issubclass(KubernetesBackend, c)} == {
        "HealthGate", "NodeCordon", "NodeMeasures", "CifarTasks", "HangTriage", "JobAdoption", "ClusterViews"
    }  # fmt: skip


def test_the_core_holds_nothing_only_some_backends_do() -> None:
    for capability in CAPABILITIES:
        assert not methods(capability) & set(dir(Backend)), capability
    assert {"plan", "apply", "list", "status", "follow", "logs", "cancel", "resume"} <= set(dir(Backend))


def test_a_backend_without_a_capability_says_so_in_its_words(tmp_path) -> None:
    backend = LocalBackend(tmp_path)
    assert backend.capability(NodeCordon) is None
    assert backend.capability(HealthGate) is backend and backend.require(CifarTasks) is backend
    with pytest.raises(BackendError) as err:
        backend.require(NodeCordon)
    assert err.value.message == "cordoning a node is not available on the local backend"
    assert err.value.hint == NodeCordon.elsewhere
    assert KubernetesBackend.__mro__ and not issubclass(KubernetesBackend, BudgetChange)


def test_which_spec_fields_a_backend_reads_is_its_own_and_known_before_it_opens() -> None:
    from torchdeck.backends import BACKENDS as NAMES
    from torchdeck.backends import FIELDS, backend_fields

    classes = {"local": LocalBackend, "kubernetes": KubernetesBackend, "eks": KubernetesBackend}
    assert set(FIELDS) == set(NAMES) == set(classes)
    assert {name: backend_fields(name) for name in NAMES} == {name: cls.fields for name, cls in classes.items()}
    assert LocalBackend.fields == "local" and KubernetesBackend.fields == "cluster"

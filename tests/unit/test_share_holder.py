"""The holder search of kept shared tensors (:func:`wsprof.capture.sharing.holder_path`) on
plain objects: the attribute chain from a named root, None when only a frame holds it."""

from __future__ import annotations

from wsprof.capture.sharing import holder_path


class UpdateWeightFromTensor:
    def __init__(self) -> None:
        self.long_lived_tensors: list[dict[str, object]] = []


class Bucket:
    pass


def test_holder_path_names_the_attribute_chain() -> None:
    u = UpdateWeightFromTensor()
    for _ in range(4):
        u.long_lived_tensors.append({"flattened_tensor": Bucket(), "metadata": []})
    target = u.long_lived_tensors[3]["flattened_tensor"]
    assert holder_path(target) == "UpdateWeightFromTensor.long_lived_tensors[3]['flattened_tensor']"


def test_holder_path_of_a_local_only_is_none() -> None:
    def scope() -> str | None:
        b = Bucket()
        return holder_path(b)

    assert scope() is None

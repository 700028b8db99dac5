"""A stand-in for torchvision, for SGLang's imports on a CPU torch no torchvision build matches.

SGLang 0.5.15.post1 imports torchvision at module level for image and video inputs
(sglang/srt/utils/common.py:94, sglang/srt/multimodal/*), which nothing in these tests uses, and
PyPI's torchvision wheels are built against PyPI's CUDA torch (their `_C.so` needs
libtorch_cuda.so), so they do not load beside torch+cpu. Every `torchvision.<sub>` module
imports, every attribute is a placeholder class, and using one raises. transformers is told the
truth (no torchvision) by `hide_torchvision_from_transformers`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class _Placeholder:
    """Any torchvision object SGLang names at import time; calling or using it raises."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("torchvision stand-in: no vision ops in these tests")

    def __class_getitem__(cls, item):
        return cls


def _module_getattr(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (_Placeholder,), {})


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes every `torchvision.<sub>` importable as a placeholder module."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr
        return module

    def exec_module(self, module):
        return None


__getattr__ = _module_getattr
sys.meta_path.insert(0, _SubmoduleFinder())


def hide_torchvision_from_transformers() -> None:
    """transformers imports torchvision's real API when it finds the package; it must not."""
    import transformers.utils as utils
    import transformers.utils.import_utils as import_utils

    import_utils.is_torchvision_available = utils.is_torchvision_available = lambda: False
    import_utils.is_torchvision_v2_available = utils.is_torchvision_v2_available = lambda: False

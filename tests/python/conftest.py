"""What the attnscore.torch tests share: `calls`, the engine calls that
attnscore.torch._run made (test_torch_modules.py records its own, with
their arguments)."""

import pytest


@pytest.fixture
def calls(monkeypatch):
    """The functions of the engine calls attnscore.torch._run made."""
    import attnscore.torch as at

    recorded = []
    real = at._run

    def spy(fn, *args, **kwargs):
        recorded.append(fn)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(at, "_run", spy)
    return recorded

"""Fixtures of the server's tests: a folder of models, and a server of them
on free ports for a test module."""

import json
import os
import shutil

import numpy as np
import pytest

from server_testing import GOLDEN, SERVER
from server_util import Server


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    shutil.copy(os.path.join(GOLDEN, "additive_toy", "model.safetensors"),
                folder / "additive_toy.safetensors")
    shutil.copy(os.path.join(GOLDEN, "concat_tutorial", "model.safetensors"),
                folder / "concat_tutorial.safetensors")
    query_size = np.load(os.path.join(GOLDEN, "concat_tutorial", "queries.npy")).shape[-1]
    (folder / "concat_tutorial.json").write_text(json.dumps({"query_size": int(query_size)}))
    return folder


@pytest.fixture(scope="module")
def server(models):
    with Server(SERVER, "--models", str(models), log=None) as running:
        yield running

"""The worker queue's pieces that need no database: the settings, the names and bytes
that cross the queue, and a worker's options."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from satsgate.config.settings import load_settings
from satsgate.engines.errors import EngineError
from satsgate.engines.image_codec import to_png
from satsgate.engines.local import ocr_worker
from satsgate.errors import ErrorCode
from satsgate.workers import codec
from satsgate.workers.worker import parse_engines, run_encoded

PG = "postgresql://satsgate@127.0.0.1/satsgate"


def test_queue_mode_is_read_from_the_config_file_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "satsgate.toml"
    config.write_text(f'[store]\nurl = "{PG}"\n[workers]\nmode = "queue"\nqueue_wait_s = 30\n')
    settings = load_settings(config, environ={})
    assert (settings.workers_mode, settings.workers_queue_wait_s) == ("queue", 30.0)
    env = {"SATSGATE_WORKERS_MODE": "queue", "SATSGATE_STORE_URL": PG}
    assert load_settings(environ=env).workers_mode == "queue"
    assert load_settings(environ={}).workers_mode == "pool"  # the default, unchanged


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ('[workers]\nmode = "queue"\n', "needs the store in PostgreSQL"),
        (f'[store]\nurl = "{PG}"\n[workers]\nmode = "cloud"\n', '"pool" or "queue"'),
        ('[workers]\nqueue = "yes"\n', "takes only mode and queue_wait_s"),
    ],
)
def test_a_queue_setting_that_cannot_work_is_refused(tmp_path: Path, table: str, said: str) -> None:
    config = tmp_path / "satsgate.toml"
    config.write_text(table)
    with pytest.raises(ValueError, match=said):
        load_settings(config, environ={})


def test_functions_are_named_and_only_satsgate_functions_resolve() -> None:
    ref = codec.function_ref(ocr_worker.ocr_image)
    assert ref == "satsgate.engines.local.ocr_worker:ocr_image"
    assert codec.engine_of(ref) == "ocr" and codec.resolve(ref) is ocr_worker.ocr_image
    assert codec.engine_of(codec.function_ref(to_png)) == "images"
    for bad in ("os:system", "satsgate.engines.local.ocr_worker:PageText", "satsgate.x:y"):
        with pytest.raises(codec.UnknownFunction):
            codec.resolve(bad)
    with pytest.raises(ValueError, match="top-level"):
        codec.function_ref(lambda: None)


def test_the_unpickler_builds_values_and_satsgate_classes_only() -> None:
    page = ocr_worker.PageText("text", "tesseract", 91.0)
    assert codec.loads(codec.dumps((b"x", {"a": [1.5]}, page))) == (b"x", {"a": [1.5]}, page)

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, ("true",))

    with pytest.raises(pickle.UnpicklingError, match="may not cross"):
        codec.loads(pickle.dumps(Exploit()))


def test_a_path_cannot_go_to_a_worker() -> None:
    with pytest.raises(TypeError, match="bytes, not a path"):
        codec.check_portable((Path("/tmp/piece.wav"),))


def test_outcomes_carry_values_engine_errors_and_exceptions() -> None:
    assert codec.open_outcome(codec.value_outcome([1, "a"])) == [1, "a"]
    error = EngineError(ErrorCode.INVALID_INPUT, "Bad page.", retry_after_s=2.0)
    with pytest.raises(EngineError) as caught:
        codec.open_outcome(codec.error_outcome(error))
    assert (caught.value.code, caught.value.message) == (ErrorCode.INVALID_INPUT, "Bad page.")
    assert caught.value.retry_after_s == 2.0
    with pytest.raises(ValueError, match="no page"):
        codec.open_outcome(codec.error_outcome(ValueError("no page")))


def test_a_job_runs_in_its_encoded_form_within_its_limit_and_output_bound() -> None:
    ref = codec.function_ref(to_png)
    status, outcome, error = run_encoded(ref, codec.dumps((b"not an image",)), 5.0, 1 << 20)
    assert status == "error" and error is None and outcome is not None
    with pytest.raises(Exception):  # noqa: B017 - what to_png raises, carried over
        codec.open_outcome(outcome)
    from tests.documents_inputs import png, text_image

    image = png(text_image(["big enough"]))
    status, outcome, _ = run_encoded(ref, codec.dumps((image,)), 5.0, 100)
    assert status == "error" and outcome is not None
    with pytest.raises(EngineError, match="larger than this node keeps"):
        codec.open_outcome(outcome)
    status, outcome, _ = run_encoded(ref, codec.dumps((image,)), 5.0, 1 << 24)
    assert status == "done" and codec.open_outcome(outcome or b"")[:4] == b"\x89PNG"


def test_worker_engines_are_checked() -> None:
    assert parse_engines("ocr, tts") == frozenset({"ocr", "tts"})
    assert parse_engines(None) is None
    with pytest.raises(ValueError, match="unknown engines: gpu"):
        parse_engines("ocr,gpu")

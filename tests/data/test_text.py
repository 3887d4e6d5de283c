"""Text data: the byte tokenizer, token files written and read back, the document split, the built-in corpus,
BERT's masking statistics, token windows, GLUE TSV files, and the errors for bad input (tiktoken and tokenizers are
optional: their offline failure is tested with stand-in modules, their real use needs a download)."""
import json
import math
import sys
import types
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from crate_nn.data.corpus import TokenBlocks, builtin_corpus, load_corpus, read_tokens, token_dtype
from crate_nn.data.documents import find_documents, read_texts, split_ids, stdlib_documents
from crate_nn.data.glue import read_glue_tsv, stdlib_next_lines
from crate_nn.data.masking import IGNORE, Masking
from crate_nn.data.preparation import prepare, token_split
from crate_nn.data.tokenizers import BYTE_EOT, BYTE_MASK, ByteTokenizer, get_tokenizer
from crate_nn.prepare_text import main


def _corpus_files(root, texts: dict[str, str], jsonl: list[str] | None = None):
    root.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    if jsonl is not None:
        (root / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in jsonl) + "\n")
    return root


# ----------------------------------------------------------------------------------------------- tokenizers
@given(st.text(max_size=200))
def test_byte_tokenizer_round_trips_any_text(text):
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode(text)
    assert ids.dtype == np.int64 and ids.tolist() == list(text.encode("utf-8"))
    assert tokenizer.decode(ids.tolist()) == text
    assert tokenizer.decode([BYTE_EOT, BYTE_MASK]) == "<|endoftext|><mask>"


def test_tokenizer_specs_and_their_errors():
    assert get_tokenizer("bytes").vocab_size == 258
    for bad in ("gpt2", "tiktoken:", "hf", "sentencepiece:x"):
        with pytest.raises(ValueError, match="tokenizer: expected 'bytes'"):
            get_tokenizer(bad)
    with pytest.raises(TypeError, match="tokenizer"):
        get_tokenizer(None)


@pytest.mark.parametrize("spec, module, attribute", [("tiktoken:gpt2", "tiktoken", "get_encoding"),
                                                     ("hf:roberta-base", "tokenizers", "Tokenizer")])
def test_a_tokenizer_that_cannot_be_downloaded_gives_a_clear_error(monkeypatch, spec, module, attribute):
    """A stand-in package whose download fails as it does offline: the error names the tokenizer and the remedy."""
    def offline(*args, **kwargs):
        raise ConnectionError("network is unreachable")

    fake = types.ModuleType(module)
    setattr(fake, attribute, offline if module == "tiktoken" else types.SimpleNamespace(from_pretrained=offline))
    monkeypatch.setitem(sys.modules, module, fake)
    get_tokenizer.cache_clear()
    with pytest.raises(ValueError, match=r"cannot obtain .*(downloads|downloaded) .*once") as info:
        get_tokenizer(spec)
    assert spec.split(":")[1] in str(info.value) and "network is unreachable" in str(info.value)
    get_tokenizer.cache_clear()


@pytest.mark.parametrize("spec, package", [("tiktoken:gpt2", "tiktoken"), ("hf:roberta-base", "tokenizers")])
def test_a_missing_optional_package_is_named(monkeypatch, spec, package):
    monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
    get_tokenizer.cache_clear()
    with pytest.raises(ValueError, match=f"pip install {package}"):
        get_tokenizer(spec)
    get_tokenizer.cache_clear()


# ----------------------------------------------------------------------------------------------- token files
def test_prepared_token_files_round_trip(tmp_path):
    texts = {f"d{i}.txt": f"document {i} é\n" * (i + 1) for i in range(7)}
    lines = ["first json line", "second ünicode", "third"]
    root = _corpus_files(tmp_path / "corpus", texts, jsonl=lines)
    documents = find_documents([root])
    assert [d.id for d in documents] == [f"d{i}.txt" for i in range(7)] + ["docs.jsonl:0", "docs.jsonl:1",
                                                                            "docs.jsonl:2"]
    meta = prepare(documents, ByteTokenizer(), tmp_path / "tokens", val_fraction=0.2, progress=False,
                   split_by="documents")
    corpus = load_corpus(tmp_path / "tokens")
    assert corpus.train.dtype == np.uint16 and meta["dtype"] == "uint16" and corpus.tokenizer == "bytes"
    val_ids = split_ids([d.id for d in documents], 0.2)
    assert len(val_ids) == 2  # ⌈0.2 · 10⌉
    text_of = {**texts, **{f"docs.jsonl:{i}": t for i, t in enumerate(lines)}}
    for split, array in (("train", corpus.train), ("val", corpus.val)):
        expected = [b for d in documents if (d.id in val_ids) == (split == "val")
                    for b in list(text_of[d.id].encode("utf-8")) + [BYTE_EOT]]
        assert np.asarray(array).tolist() == expected
        assert meta[split]["tokens"] == len(expected)
    assert meta["train"]["documents"] + meta["val"]["documents"] == 10


def test_split_is_deterministic_order_free_and_never_empty():
    ids = [f"file{i}.py" for i in range(50)]
    val = split_ids(ids, 0.1)
    assert val == split_ids(list(reversed(ids)), 0.1) and len(val) == 5
    by_hash = sorted(ids, key=lambda d: (zlib.crc32(d.encode()), d))
    assert val == set(by_hash[:5])
    assert len(split_ids(ids[:3], 0.001)) == 1 and len(split_ids(ids[:2], 0.99)) == 1
    with pytest.raises(ValueError, match="at least 2"):
        split_ids(ids[:1], 0.1)
    with pytest.raises(ValueError, match="val_fraction"):
        split_ids(ids, 0.0)


def test_bad_corpora_and_token_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="corpus: .* does not exist"):
        find_documents([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="corpus: no documents found"):
        find_documents([tmp_path / "empty"])
    root = _corpus_files(tmp_path / "blank", {"a.txt": "", "b.txt": "", "c.txt": ""})
    with pytest.raises(ValueError, match="every document is empty"):
        prepare(find_documents([root]), _NoEot(), tmp_path / "out", 0.3, progress=False)
    bad = _corpus_files(tmp_path / "badjson", {}, jsonl=None)
    (bad / "x.jsonl").write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 of .*x.jsonl"):
        prepare(find_documents([bad]), ByteTokenizer(), tmp_path / "out2", 0.5, progress=False)
    with pytest.raises(ValueError, match="token file: .*train.bin.* does not exist"):
        read_tokens(tmp_path / "train.bin", "uint16")
    (tmp_path / "odd.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ValueError, match="not a whole non-zero number of uint16"):
        read_tokens(tmp_path / "odd.bin", "uint16")
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="holds 0 bytes"):
        read_tokens(tmp_path / "empty.bin", "uint16")
    with pytest.raises(ValueError, match="meta.json.* does not exist"):
        load_corpus(tmp_path)


def _prepared(root):
    prepare(find_documents([_corpus_files(root / "src", {f"d{i}.txt": f"text {i}" for i in range(4)})]),
            ByteTokenizer(), root / "tokens", 0.25, progress=False)
    return root / "tokens"


def _edit_meta(tokens, **changes):
    meta = json.loads((tokens / "meta.json").read_text())
    meta.update(changes)
    (tokens / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if v is not None}))


@pytest.mark.parametrize("dtype", ["float32", "uint8", "int16"])
def test_meta_json_with_another_dtype_is_refused(tmp_path, dtype):
    """A float32 meta.json used to read the uint16 ids as floats and train on garbage."""
    tokens = _prepared(tmp_path)
    _edit_meta(tokens, dtype=dtype)
    with pytest.raises(ValueError, match=f"meta.json gives dtype '{dtype}'; token files hold uint16 or uint32 ids"):
        load_corpus(tokens)


def test_meta_json_without_dtype_is_named(tmp_path):
    tokens = _prepared(tmp_path)
    _edit_meta(tokens, dtype=None)
    with pytest.raises(ValueError, match="data_dir: .*meta.json has no dtype; crate-prepare-text writes them all"):
        load_corpus(tokens)


def test_token_file_dtype_defaults_to_its_meta_json(tmp_path):
    tokens = _prepared(tmp_path)
    assert read_tokens(tokens / "train.bin").dtype == np.uint16
    with pytest.raises(ValueError, match="dtype: uint32 contradicts .*meta.json, which records uint16 for train.bin"):
        read_tokens(tokens / "train.bin", "uint32")
    with pytest.raises(ValueError, match="dtype: expected uint16 or uint32, got 'int8'"):
        read_tokens(tokens / "train.bin", "int8")


def test_windows_name_an_id_outside_the_vocabulary(tmp_path):
    """A window's last id is only a target: the model's input check never sees it."""
    path = tmp_path / "val.bin"
    ids = np.arange(20, dtype=np.uint16) % 7
    ids[12] = 300
    ids.tofile(path)
    windows = TokenBlocks(read_tokens(path), 4, 1, vocab_size=258)
    assert windows[0].tolist() == ids[:5].tolist() and windows[1].tolist() == ids[4:9].tolist()
    with pytest.raises(ValueError, match=r"tokens: id 300 at position 12 of .*val.bin is outside the vocabulary "
                                         r"\[0, 258\)"):
        windows[2]


class _NoEot(ByteTokenizer):
    eot_id = None


def test_token_dtype_follows_the_vocabulary():
    assert token_dtype(258) == np.uint16 and token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32


def test_prepare_command(tmp_path, capsys):
    root = _corpus_files(tmp_path / "c", {"a.txt": "alpha", "b.txt": "beta", "c.md": "gamma"})
    assert main(["--input", str(root), "--pattern", "*.txt", "--output-dir", str(tmp_path / "t"),
                 "--val-fraction", "0.5"]) == 0
    report = json.loads(capsys.readouterr().out)
    # split by tokens: "alpha" and "beta" with their end-of-text ids are 6 + 5 tokens; validation holds
    # round(0.5 · 11) = 6 of them (halves round up)
    assert report["split_by"] == "tokens" and report["val"]["tokens"] == 6 and report["train"]["tokens"] == 5
    assert main(["--input", str(tmp_path / "nothing"), "--output-dir", str(tmp_path / "u")]) == 1
    assert "corpus: " in capsys.readouterr().err


@given(st.lists(st.integers(0, 50), min_size=1, max_size=12), st.floats(0.01, 0.99), st.randoms())
def test_token_split_holds_the_fraction_asked_for_and_cuts_one_document(lengths, fraction, random):
    ids = [f"doc{i}.txt" for i in range(len(lengths))]
    total = sum(lengths)
    if total < 2:
        with pytest.raises(ValueError, match="at least 2"):
            token_split(lengths, ids, fraction)
        return
    val = token_split(lengths, ids, fraction)
    target = min(total - 1, max(1, math.floor(fraction * total + 0.5)))
    assert val.sum() == target and (0 <= val).all() and (val <= np.asarray(lengths)).all()
    # in CRC-32 order: whole documents, then at most one cut, then none
    order = sorted(range(len(ids)), key=lambda i: (zlib.crc32(ids[i].encode()), ids[i]))
    held = [int(val[i]) for i in order]
    whole = [h == lengths[i] for h, i in zip(held, order)]
    first_partial = next((k for k, w in enumerate(whole) if not w), len(order))
    assert all(h == 0 for h in held[first_partial + 1:])
    # independent of the order the documents come in
    perm = list(range(len(ids)))
    random.shuffle(perm)
    again = token_split([lengths[i] for i in perm], [ids[i] for i in perm], fraction)
    assert [int(again[perm.index(i)]) for i in range(len(ids))] == val.tolist()


def _messages(err):
    """The command's own lines on stderr (without the progress bar)."""
    return [line for line in err.splitlines() if line.startswith("crate-prepare-text")]


def test_prepare_text_splits_one_file_by_tokens(tmp_path, capsys):
    """One file (refused before: a split needed two documents): its last 10% of tokens are the validation split."""
    text = "To be, or not to be, that is the question.\n" * 30  # 1,290 bytes
    root = _corpus_files(tmp_path / "c", {"input.txt": text})
    assert main(["--input", str(root / "input.txt"), "--output-dir", str(tmp_path / "t"), "--block-size", "64"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    ids = list(text.encode()) + [BYTE_EOT]  # 1,291 tokens
    held = math.floor(0.1 * len(ids) + 0.5)  # 129
    assert report["val"] == {"documents": 1, "tokens": held, "share": held / len(ids)}
    assert report["train"] == {"documents": 1, "tokens": len(ids) - held, "share": 1 - held / len(ids)}
    corpus = load_corpus(tmp_path / "t")
    assert np.asarray(corpus.train).tolist() == ids[:-held] and np.asarray(corpus.val).tolist() == ids[-held:]
    assert _messages(captured.err) == []  # both splits hold a window of 64 + 1 tokens
    # with crate-train's default block of 1,024 tokens the validation split is too short: a warning names it
    assert main(["--input", str(root / "input.txt"), "--output-dir", str(tmp_path / "u")]) == 0
    assert _messages(capsys.readouterr().err) == [
        "crate-prepare-text: warning: the val split holds 129 tokens, fewer than one window of --block-size 1024 + "
        "1: training with that block size refuses it (raise --val-fraction or add text, or train with a smaller "
        "--block-size)"]


def _names_by_crc(count):
    """``count`` file names in increasing CRC-32 order (the order the split takes documents in)."""
    return sorted((f"f{i}.txt" for i in range(count)), key=lambda n: zlib.crc32(n.encode()))


def test_prepare_text_two_very_unequal_files(tmp_path, capsys):
    """The reported case: a 200-byte file and a 40,000-byte one, the large one first in CRC order. Split by whole
    documents, validation took the large file (99.5% of the tokens) and training 201 tokens, silently; split by
    tokens (the default) it holds 10% of the tokens, and the documents rule now warns."""
    large, small = _names_by_crc(2)
    root = _corpus_files(tmp_path / "c", {large: "x" * 40_000, small: "y" * 200})
    total = 40_001 + 201
    assert main(["--input", str(root / large), str(root / small), "--output-dir", str(tmp_path / "t")]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["val"]["tokens"] == math.floor(0.1 * total + 0.5) and report["train"]["tokens"] == total - 4020
    assert report["val"]["documents"] == 1 and report["train"]["documents"] == 2  # the large file is cut in two
    assert _messages(captured.err) == []
    corpus = load_corpus(tmp_path / "t")
    assert bytes(np.asarray(corpus.val[:-1]).tolist()) == b"x" * 4019  # the large file's tail
    assert main(["--input", str(root / large), str(root / small), "--output-dir", str(tmp_path / "d"),
                 "--split-by", "documents"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["train"]["tokens"] == 201
    assert _messages(captured.err) == [
        "crate-prepare-text: warning: the train split holds 201 tokens, fewer than one window of --block-size 1024 "
        "+ 1: training with that block size refuses it (raise --val-fraction or add text, or train with a smaller "
        "--block-size)",
        "crate-prepare-text: warning: the validation split holds 99.5% of the tokens (split by documents); "
        "--split-by tokens holds out --val-fraction of them"]


def test_prepare_text_refuses_an_empty_file_and_a_bad_fraction_in_one_line(tmp_path, capsys):
    root = _corpus_files(tmp_path / "c", {"empty.txt": ""})
    out = tmp_path / "t"
    assert main(["--input", str(root / "empty.txt"), "--output-dir", str(out)]) == 1
    assert _messages(capsys.readouterr().err) == [
        f"crate-prepare-text: corpus: no text in {root / 'empty.txt'} (every document is empty)"]
    assert not out.exists()  # no folder left behind
    _corpus_files(root, {"a.txt": "some text"})
    for fraction in ("0", "1", "-0.5"):
        assert main(["--input", str(root), "--output-dir", str(out), "--val-fraction", fraction]) == 1
        assert capsys.readouterr().err == (f"crate-prepare-text: val_fraction: expected a value in (0, 1), got "
                                           f"{float(fraction)}\n")
    assert not out.exists()


def test_prepare_text_refuses_or_counts_bytes_that_are_not_utf8(tmp_path, capsys):
    """Latin-1 text (é is the one byte 0xE9) was turned into U+FFFD without a word; by default it is refused naming
    the file and the byte, and ``--errors replace`` accepts it, counting the bytes replaced."""
    root = tmp_path / "c"
    root.mkdir()
    (root / "latin1.txt").write_bytes("café au lait\n".encode("latin-1") * 1000)  # 1,000 bytes 0xE9
    (root / "ok.txt").write_text("plain\n")
    (root / "lines.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "na\xefve"}\n')
    out = tmp_path / "t"
    assert main(["--input", str(root / "ok.txt"), str(root / "latin1.txt"), "--output-dir", str(out)]) == 1
    assert _messages(capsys.readouterr().err) == [
        f"crate-prepare-text: corpus: {root / 'latin1.txt'} is not UTF-8 (byte 0xe9 at offset 3); --errors replace "
        "reads it with U+FFFD for each undecodable sequence, counting the bytes"]
    assert not out.exists()
    assert main(["--input", str(root / "lines.jsonl"), "--output-dir", str(out)]) == 1
    assert _messages(capsys.readouterr().err)[0].startswith(
        f"crate-prepare-text: corpus: line 2 of {root / 'lines.jsonl'} is not UTF-8 (byte 0xef at offset 12)")
    assert main(["--input", str(root), "--output-dir", str(out), "--errors", "replace"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["undecodable"] == {"bytes": 1001, "documents": 2}
    assert _messages(captured.err) == [
        "crate-prepare-text: warning: 1,001 bytes that are not UTF-8 (in 2 of 4 documents) were replaced by U+FFFD"]
    corpus = load_corpus(out)
    tokens = np.concatenate([corpus.train, corpus.val]).tolist()
    assert tokens.count(0xE9) == 0 and bytes(t for t in tokens if t < 256).count("\ufffd".encode()) == 1001


# ----------------------------------------------------------------------------------------------- built-in corpus
def test_builtin_corpus_is_the_standard_library_split_by_file():
    documents = stdlib_documents()
    ids = [d.id for d in documents]
    assert len(ids) > 100 and ids == sorted(ids) and all(i.endswith(".py") for i in ids)
    assert not any("site-packages" in i for i in ids)
    corpus = builtin_corpus()
    val = split_ids(ids, 0.01)
    assert len(val) == math.ceil(0.01 * len(ids))
    separators = int((corpus.train == BYTE_EOT).sum()), int((corpus.val == BYTE_EOT).sum())
    assert separators == (len(ids) - len(val), len(val))  # one end-of-text per document
    assert corpus.train.max() <= BYTE_EOT and corpus.vocab_size == 258 and corpus.mask_id == BYTE_MASK
    first_val = next(d for d in documents if d.id in val)
    head = next(read_texts([first_val])).encode("utf-8")[:200]
    start = np.asarray(corpus.val[:len(head)], dtype=np.int64)
    assert bytes(start.tolist()) == head  # the first validation file's text opens the validation split


def test_builtin_next_line_pairs_are_balanced_and_seeded():
    pairs = stdlib_next_lines("val", 40, seed=3)
    assert pairs.labels == [i % 2 for i in range(40)] and pairs.classes == ["0", "1"]
    assert all(len(t) == 2 and t[0] and t[1] for t in pairs.texts)
    assert stdlib_next_lines("val", 40, seed=3).texts == pairs.texts != stdlib_next_lines("val", 40, seed=4).texts


# ----------------------------------------------------------------------------------------------- masking
def test_masking_statistics_on_a_large_draw():
    """15% of the non-special tokens selected; of those 80% → <mask>, 10% → a random token, 10% kept."""
    special = (0, 1, 2)  # the <mask> id 3 is special too
    masking = Masking(mask_id=3, vocab_size=50, special_ids=special)
    tokens = torch.randint(0, 50, (400, 500), generator=torch.Generator().manual_seed(0))
    inputs, labels = masking(tokens, torch.Generator().manual_seed(1))
    eligible = ~torch.isin(tokens, torch.tensor((*special, 3)))
    selected = labels != IGNORE
    n = int(eligible.sum())
    assert not (selected & ~eligible).any() and torch.equal(labels[selected], tokens[selected])
    assert torch.equal(inputs[~selected], tokens[~selected])
    # every tolerance: 5 binomial standard deviations of the observed share (a false alarm once in 10^6 draws)
    share = selected.sum().item() / n
    assert abs(share - 0.15) < 5 * math.sqrt(0.15 * 0.85 / n)
    k = int(selected.sum())
    masked = (inputs == 3) & selected
    changed = (inputs != tokens) & selected & ~masked
    # random ids come from the 46 ids that are neither special nor <mask>; 1 in 46 equals the original and
    # looks kept, so the visibly changed share is 0.1 · 45/46
    for observed, p in ((masked.sum().item() / k, 0.8), (changed.sum().item() / k, 0.1 * 45 / 46)):
        assert abs(observed - p) < 5 * math.sqrt(p * (1 - p) / k)
    assert not torch.isin(inputs[changed], torch.tensor((*special, 3))).any()


def test_masking_reproduces_with_a_seed_and_checks_its_arguments():
    masking = Masking(mask_id=257, vocab_size=258, special_ids=(256, 257))
    tokens = torch.randint(0, 256, (4, 64))
    first = masking(tokens, torch.Generator().manual_seed(5))
    second = masking(tokens, torch.Generator().manual_seed(5))
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    with pytest.raises(ValueError, match="mask_id"):
        Masking(mask_id=300, vocab_size=258)
    with pytest.raises(ValueError, match="mask_fraction, random_fraction"):
        Masking(mask_id=1, vocab_size=10, mask_fraction=0.95, random_fraction=0.1)


# ----------------------------------------------------------------------------------------------- windows
@given(length=st.integers(10, 200), block=st.integers(1, 9), extra=st.sampled_from([0, 1]))
def test_token_windows_are_consecutive(length, block, extra):
    tokens = np.arange(length, dtype=np.uint16)
    windows = TokenBlocks(tokens, block, extra)
    assert len(windows) == (length - extra) // block
    for i in (0, len(windows) - 1):
        assert windows[i].tolist() == list(range(i * block, i * block + block + extra))
        assert windows[i].dtype == torch.int64


def test_windows_longer_than_the_split_are_refused():
    with pytest.raises(ValueError, match="block_size: 10 \\(\\+1\\) exceeds the 10 tokens"):
        TokenBlocks(np.zeros(10, np.uint16), 10, 1)


# ----------------------------------------------------------------------------------------------- GLUE TSV
def test_glue_tsv_single_sentences_and_pairs(tmp_path):
    sst = tmp_path / "train.tsv"
    sst.write_text('sentence\tlabel\nit \'s a "charming" film \t1\nawful\t0\nfine\t1\n')
    data = read_glue_tsv(sst, ["sentence"], "label")
    assert data.texts == [("it 's a \"charming\" film ",), ("awful",), ("fine",)]
    assert data.labels == [1, 0, 1] and data.classes == ["0", "1"]
    mrpc = tmp_path / "dev.tsv"
    mrpc.write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA b .\tA b !\n0\t3\t4\tc\td\n")
    pairs = read_glue_tsv(mrpc, ["#1 String", "#2 String"], "Quality")
    assert pairs.texts == [("A b .", "A b !"), ("c", "d")] and pairs.labels == [1, 0]
    with pytest.raises(ValueError, match=r"no column\(s\) \['Sentence'\]"):
        read_glue_tsv(sst, ["Sentence"], "label")
    with pytest.raises(ValueError, match="outside the classes"):
        read_glue_tsv(sst, ["sentence"], "label", classes=["0"])
    with pytest.raises(ValueError, match="glue file: .* does not exist"):
        read_glue_tsv(tmp_path / "test.tsv", ["sentence"], "label")
    short = tmp_path / "short.tsv"
    short.write_text("sentence\tlabel\nonly one field\n")
    with pytest.raises(ValueError, match="line 2 of .*short.tsv has 1 tab-separated fields, its header 2"):
        read_glue_tsv(short, ["sentence"], "label")


def test_glue_tsv_refuses_a_row_with_an_extra_field(tmp_path):
    """A stray tab in a sentence used to shift its tail into the label column: a third class, silently."""
    sst = tmp_path / "train.tsv"
    sst.write_text("sentence\tlabel\ngood\t1\n\nbad\t0\nhalf\tgood\t1\n")
    with pytest.raises(ValueError, match="line 5 of .*train.tsv has 3 tab-separated fields, its header 2"):
        read_glue_tsv(sst, ["sentence"], "label")


def test_glue_tsv_refuses_an_empty_label(tmp_path):
    sst = tmp_path / "train.tsv"
    sst.write_text("sentence\tlabel\ngood\t1\nunlabelled\t\nbad\t0\n")
    with pytest.raises(ValueError, match="line 3 of .*train.tsv has an empty 'label'"):
        read_glue_tsv(sst, ["sentence"], "label")


def test_glue_tsv_reads_a_200_kb_field(tmp_path):
    """Python's csv module stops at 128 KiB per field; GLUE's format has no quoting, so no limit is needed: the
    text is cut to max_length tokens later anyway."""
    long = "word " * 40_000
    sst = tmp_path / "train.tsv"
    sst.write_text(f"sentence\tlabel\n{long}\t1\r\nshort\t0\r\n")
    data = read_glue_tsv(sst, ["sentence"], "label")
    assert data.texts == [(long,), ("short",)] and data.labels == [1, 0]


def test_invalid_utf8_names_the_file_and_the_byte_offset(tmp_path):
    sst = tmp_path / "train.tsv"
    sst.write_bytes(b"sentence\tlabel\ngood\t1\nb\xffd\t0\n")
    with pytest.raises(ValueError, match=r"glue file: .*train.tsv is not UTF-8 text \(byte 0xff at byte offset 23, "
                                         r"line 3\)"):
        read_glue_tsv(sst, ["sentence"], "label")

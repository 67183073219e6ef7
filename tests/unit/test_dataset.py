"""Datasets: JSONL prompts, JSONL chats, ShareGPT, the built-in prompt set; bad files are one line
naming the file and the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specwatch.errors import UsageError
from specwatch.load import dataset, promptset
from specwatch.load.dataset import Entry, fit_entry, load_dataset, render_chat
from specwatch.load.workload import resolve


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_jsonl_prompts_and_chats(tmp_path: Path) -> None:
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"},
                         {"role": "assistant", "content": "Hello."}], "category": "chat", "id": 7}
    path = _write(tmp_path, "d.jsonl", json.dumps({"prompt": "Add 2 and 3.", "category": "math"}) + "\n\n"
                  + json.dumps(chat) + "\n")
    data = load_dataset(path)
    assert [e.category for e in data.entries] == ["math", "chat"]
    assert data.entries[0].text == "Add 2 and 3."
    # the trailing assistant turn is the answer, not the prompt; the chat ends where the reply begins
    assert data.entries[1].messages == (("system", "Be brief."), ("user", "Hi?"))
    assert data.entries[1].text == "<|system|>\nBe brief.\n<|user|>\nHi?\n<|assistant|>\n"
    assert len(data.sha256) == 64 and data.categories() == ["chat", "math"]


def test_sharegpt_takes_each_conversation_s_first_human_turn(tmp_path: Path) -> None:
    doc = [
        {"id": "a", "conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q1"},
                                      {"from": "gpt", "value": "A1"}, {"from": "human", "value": "Q2"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "only a reply"}]},  # no human turn: skipped
        {"id": "c", "conversations": [{"from": "human", "value": "Q3"}]},
    ]
    data = load_dataset(_write(tmp_path, "sharegpt.json", json.dumps(doc, indent=2)))
    assert [e.messages for e in data.entries] == [(("system", "S"), ("user", "Q1")), (("user", "Q3"),)]
    assert data.skipped == 1


def test_the_builtin_set_is_varied_and_is_what_its_generator_makes() -> None:
    data = load_dataset("builtin")
    counts = {c: sum(e.category == c for e in data.entries) for c in data.categories()}
    assert counts == promptset.COUNTS and len(data.entries) >= 300
    assert len({e.text for e in data.entries}) == len(data.entries)
    assert any(e.messages for e in data.entries) and any(e.prompt for e in data.entries)
    long = [len(e.text.split()) for e in data.entries if e.category == "long-context"]
    assert min(long) >= 500
    assert dataset.builtin_path().read_text(encoding="utf-8") == promptset.render(promptset.generate()), \
        "regenerate it: python -m specwatch.load.promptset"


@pytest.mark.parametrize(("name", "text", "where", "what"), [
    ("bad.jsonl", '{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": \n', ":3:", "not valid JSON"),
    ("neither.jsonl", '{"prompt": "a"}\n{"text": "b"}\n', ":2:", "exactly one of \"prompt\" or \"messages\""),
    ("both.jsonl", '{"prompt": "a", "messages": []}\n', ":1:", "got both"),
    ("empty-prompt.jsonl", '{"prompt": "  "}\n', ":1:", "non-empty string"),
    ("role.jsonl", '{"prompt": "a"}\n{"messages": [{"role": "robot", "content": "x"}]}\n', ":2:", "messages[0]"),
    ("no-user.jsonl", '{"messages": [{"role": "system", "content": "x"}]}\n', ":1:", "no user turn"),
    ("array-line.jsonl", '{"prompt": "a"}\n[1, 2]\n', ":2:", "expected a JSON object"),
    ("category.jsonl", '{"prompt": "a", "category": 3}\n', ":1:", "category"),
    ("sharegpt.json", '[\n {"conversations": [{"from": "human", "value": "q"}]},\n {"conversations": "x"}\n]',
     ":3:", "entry 1"),
    ("speaker.json", '[{"conversations": []},\n\n{"conversations": [{"from": "alien", "value": "q"}]}]', ":3:",
     "conversations[0]"),
    ("broken.json", '[{"conversations": []},\n{"conversations": [}]', ":2:", "not valid JSON"),
    ("trailing.json", '[{"conversations": [{"from": "human", "value": "q"}]}]\n]', ":2:", "after the array"),
    ("empty.json", "[]", "empty.json:", "no usable prompts"),
    ("text.txt", "hello\n", ":1:", "not a dataset"),
    ("blank.jsonl", "", ":1:", "an empty file"),
])
def test_a_bad_file_is_one_line_naming_file_and_line(tmp_path: Path, name: str, text: str, where: str,
                                                      what: str) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(UsageError) as info:
        load_dataset(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert where in message and what in message, message


def test_unreadable_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"dataset .*missing.jsonl does not exist"):
        load_dataset(tmp_path / "missing.jsonl")
    with pytest.raises(UsageError, match=r"is a directory"):
        load_dataset(tmp_path)
    path = _write(tmp_path, "latin1.jsonl", b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(UsageError, match=r"latin1.jsonl:2: not UTF-8"):
        load_dataset(path)


def test_categories_filter_and_name_what_is_missing(tmp_path: Path) -> None:
    data = load_dataset("builtin")
    assert {e.category for e in data.only(["code", "math"])} == {"code", "math"}
    with pytest.raises(UsageError, match="no entries of category poetry; it has chat, code"):
        data.only(["code", "poetry"])


def test_fitting_a_prompt_to_a_word_count() -> None:
    assert fit_entry(Entry(prompt="a b c d e"), 3).text == "a b c"
    assert fit_entry(Entry(prompt="a b"), 5).text == "a b a b a"
    chat = Entry(messages=(("system", "be kind"), ("user", "one two three four")))
    fitted = fit_entry(chat, 4)  # the system turn keeps its 2 words, the user turn gets the other 2
    assert fitted.messages == (("system", "be kind"), ("user", "one two"))
    assert render_chat(fitted.messages).endswith("<|user|>\none two\n<|assistant|>\n")


def test_a_relative_dataset_is_anchored_to_the_profile_file_s_folder(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from specwatch.profiles.loading import load_profiles

    folder = tmp_path / "profiles"
    folder.mkdir()
    _write(folder, "mine.jsonl", '{"prompt": "one two three"}\n')
    (folder / "p.toml").write_text('version = 1\n[[server]]\nname = "a"\nengine = "reference"\n'
                                   '[workload]\ndataset = "mine.jsonl"\n')
    monkeypatch.chdir(tmp_path)  # not the profile's folder
    table = load_profiles("profiles/p.toml").workload
    assert table["dataset"] == str(folder / "mine.jsonl")
    assert resolve("single-stream", table).prompts()[0] == "one two three"

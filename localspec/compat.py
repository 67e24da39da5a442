"""Can this draft speculate for this target? The vocabulary check of llama.cpp's
common_speculative_are_compatible: same vocabulary type and BOS/EOS handling, sizes within 128,
and identical token text from id 5 to the smaller size."""

from __future__ import annotations

from .llama import LlamaError, Model

MAX_SIZE_DIFFERENCE = 128  # llama.cpp SPEC_VOCAB_MAX_SIZE_DIFFERENCE
CHECK_START_TOKEN = 5      # llama.cpp SPEC_VOCAB_CHECK_START_TOKEN_ID


class IncompatibleVocab(LlamaError):
    """The draft cannot speculate for the target: their token ids mean different things."""


def check_compatible(target: Model, draft: Model) -> None:
    """Raise IncompatibleVocab naming the first difference; return None when the pair is usable."""
    problem = first_difference(target, draft)
    if problem:
        raise IncompatibleVocab(
            f"draft {draft.path.name} cannot speculate for target {target.path.name}: {problem}; "
            "use a draft from the same model family (check with `localspec models check TARGET DRAFT`)")


def first_difference(target: Model, draft: Model) -> str | None:
    """A one-phrase description of the first vocabulary mismatch, or None."""
    facts = [("vocabulary type", Model.vocab_type), ("add-BOS flag", Model.adds_bos),
             ("add-EOS flag", Model.adds_eos), ("BOS token", Model.bos), ("EOS token", Model.eos)]
    for what, fact in facts:
        t, d = fact(target), fact(draft)
        if t != d:
            return f"{what} differs (target {t}, draft {d})"
    if abs(target.n_vocab - draft.n_vocab) > MAX_SIZE_DIFFERENCE:
        return (f"vocabulary sizes differ by more than {MAX_SIZE_DIFFERENCE} "
                f"(target {target.n_vocab}, draft {draft.n_vocab})")
    for token in range(CHECK_START_TOKEN, min(target.n_vocab, draft.n_vocab)):
        t, d = target.token_text(token), draft.token_text(token)
        if t != d:
            return f"token {token} is {t.decode('utf-8', 'replace')!r} in the target but {d.decode('utf-8', 'replace')!r} in the draft"
    return None

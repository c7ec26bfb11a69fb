"""Test oracle: one model's rendering rules as a declared object (study 000 Appendix A, B.3).

The package renders through ``models[].generation_bos`` / ``scoring_bos`` of a grid (actors/model_actor.py); this
class states the same rule with :mod:`confgrid.protocols.chat` so the tests can check the plain-text base-model case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confgrid.protocols.chat import render_prompt_ids, scoring_request
from confgrid.protocols.contexts import ScoringContext


@dataclass(frozen=True)
class RenderPolicy:
    """How one model's prompts are rendered, declared per model (study 000 Appendix A, B.3).

    Attributes
    ----------
    use_chat_template : bool, default True
        Wrap prompts with the tokenizer's chat template; False for base models without one (the plain-text rule of
        :mod:`confgrid.protocols.chat`).
    generation_bos : bool or None, default None
        ``add_bos`` for generation prompts (None: the tokenizer's default).
    scoring_bos : bool or None, default None
        ``add_bos`` for scoring contexts (None: the tokenizer's default).
    system_prompt : str or None, default None
        An explicit system turn; None keeps the template's default.

    Examples
    --------
    >>> RenderPolicy.base_model()
    RenderPolicy(use_chat_template=False, generation_bos=False, scoring_bos=True, system_prompt=None)
    """

    use_chat_template: bool = True
    generation_bos: bool | None = None
    scoring_bos: bool | None = None
    system_prompt: str | None = None

    def __post_init__(self) -> None:
        for name in ("generation_bos", "scoring_bos"):
            v = getattr(self, name)
            if v not in (None, True, False):
                raise ValueError(f"RenderPolicy: {name}={v!r}; allowed: None, True, False")
        if not isinstance(self.use_chat_template, bool):
            raise ValueError(f"RenderPolicy: use_chat_template={self.use_chat_template!r}; must be a bool")

    @classmethod
    def base_model(cls) -> RenderPolicy:
        """Base checkpoints without a chat template (study 000 Appendix B.3): plain text,
        generation without BOS, scoring with BOS."""
        return cls(use_chat_template=False, generation_bos=False, scoring_bos=True)

    def generation_ids(self, tokenizer: Any, user_text: str, assistant_prefix: str = "") -> list[int]:
        """Prompt ids for generation (``add_bos=generation_bos``)."""
        return render_prompt_ids(
            tokenizer,
            user_text,
            use_chat_template=self.use_chat_template,
            assistant_prefix=assistant_prefix,
            system_prompt=self.system_prompt,
            add_bos=self.generation_bos,
        )

    def scoring_request(
        self, tokenizer: Any, context: ScoringContext, item_question: str, answer: str
    ) -> tuple[list[int], list[int]]:
        """:func:`scoring_request` under this policy (``add_bos=scoring_bos``)."""
        return scoring_request(
            tokenizer,
            context,
            item_question,
            answer,
            self.use_chat_template,
            system_prompt=self.system_prompt,
            add_bos=self.scoring_bos,
        )

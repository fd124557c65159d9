"""DEL's maths in pure PyTorch: no Axolotl, transformers or Trainer import, usable from any training loop.

The public API, in the order a training step uses it::

    vocab = DigitVocab.from_tokenizer(tokenizer)             # the digit tokens, and number tokens ('123')
    places = next_token_places(labels, vocab)                # place of each digit target in its number
    targets = shift_to_next_token(labels, -100)              # position t predicts targets[:, t]
    digits = capture.digit_targets(targets)                  # DigitLogitsCapture(model, vocab): from hidden states
    loss = ce + digit_criterion_loss("del", digits, places, alpha=0.1)

``labels`` are the raw labels of a batch (as a collator builds them, ``-100`` where masked); ``targets`` are labels
aligned with the model's positions (shifted by one for causal LMs); ``places`` are aligned like ``targets``.
Everything else stays importable from its module: ``vocab``, ``places``, ``digits``, ``hidden``, ``capture``,
``criteria``.
"""

from .capture import DigitLogitsCapture
from .criteria import CRITERIA, digit_criterion_loss, digit_entropy_loss
from .digits import DigitTargets, digit_correct, digit_entropy, digit_targets_from_logits
from .hidden import digit_targets_from_hidden
from .places import PlaceWeighting, next_token_places, number_places, shift_to_next_token
from .vocab import DigitVocab

__all__ = [
    "DigitVocab",
    "number_places",
    "next_token_places",
    "shift_to_next_token",
    "PlaceWeighting",
    "DigitTargets",
    "digit_targets_from_logits",
    "digit_targets_from_hidden",
    "DigitLogitsCapture",
    "CRITERIA",
    "digit_criterion_loss",
    "digit_entropy_loss",
    "digit_entropy",
    "digit_correct",
]

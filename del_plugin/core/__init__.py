"""DEL's maths in pure PyTorch: no Axolotl or Trainer import, usable from any training loop.

Layering: ``vocab`` (digit token ids) -> ``places`` (number spans, place weights) -> ``digits`` (the ten digit
logits at each target) -> ``losses`` (DEL) / ``modules`` (``nn.Module`` wrappers).
"""

from .digits import DigitTargets, digit_correct, digit_entropy, gather_digit_targets
from .losses import Reduction, del_token_losses, digit_entropy_loss, reduce_token_losses
from .places import (
    NOT_A_DIGIT,
    PlaceWeighting,
    next_token_places,
    number_places,
    place_weights,
    shift_to_next_token,
)
from .vocab import (
    DIGIT_PROBE_TEXT,
    DigitVocab,
    DigitVocabError,
    MultiDigitTokenizerError,
    NoDigitTokensError,
)

__all__ = [
    "DIGIT_PROBE_TEXT",
    "NOT_A_DIGIT",
    "DigitTargets",
    "DigitVocab",
    "DigitVocabError",
    "MultiDigitTokenizerError",
    "NoDigitTokensError",
    "PlaceWeighting",
    "Reduction",
    "del_token_losses",
    "digit_correct",
    "digit_entropy",
    "digit_entropy_loss",
    "gather_digit_targets",
    "next_token_places",
    "number_places",
    "place_weights",
    "reduce_token_losses",
    "shift_to_next_token",
]

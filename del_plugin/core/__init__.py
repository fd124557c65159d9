"""DEL's maths in pure PyTorch: no Axolotl or Trainer import, usable from any training loop.

Layering: ``vocab`` (digit token ids) -> ``places`` (number spans, place weights) -> ``digits`` / ``hidden`` (the
ten digit logits at each target, from logits or from hidden states) -> ``capture`` (from a Hugging Face causal
LM's forward) -> ``losses`` (DEL) -> ``criteria`` (the paper's baselines and ablation).
"""

from .criteria import (
    CRITERIA,
    DIGIT_CRITERIA,
    TOKEN_CRITERIA,
    Criterion,
    TokenCriterionTerms,
    criterion_token_losses,
    del_dist_token_losses,
    digit_criterion_loss,
    digit_criterion_token_losses,
    dist2_place_weights,
    dist2_token_losses,
    emo_cost_embedding,
    emo_token_losses,
    mixce_token_losses,
    ntl_mse_token_losses,
    ntl_was_token_losses,
    token_nll,
)
from .capture import DigitCaptureError, DigitLogitsCapture
from .digits import DigitTargets, digit_correct, digit_entropy, digit_targets_from_logits
from .hidden import digit_logits_from_hidden, digit_targets_from_hidden
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
    "CRITERIA",
    "DIGIT_CRITERIA",
    "TOKEN_CRITERIA",
    "Criterion",
    "TokenCriterionTerms",
    "criterion_token_losses",
    "del_dist_token_losses",
    "digit_criterion_loss",
    "digit_criterion_token_losses",
    "dist2_place_weights",
    "dist2_token_losses",
    "emo_cost_embedding",
    "emo_token_losses",
    "mixce_token_losses",
    "ntl_mse_token_losses",
    "ntl_was_token_losses",
    "token_nll",
    "DIGIT_PROBE_TEXT",
    "NOT_A_DIGIT",
    "DigitTargets",
    "DigitVocab",
    "DigitVocabError",
    "DigitCaptureError",
    "DigitLogitsCapture",
    "MultiDigitTokenizerError",
    "NoDigitTokensError",
    "PlaceWeighting",
    "Reduction",
    "del_token_losses",
    "digit_correct",
    "digit_entropy",
    "digit_entropy_loss",
    "digit_logits_from_hidden",
    "digit_targets_from_hidden",
    "digit_targets_from_logits",
    "next_token_places",
    "number_places",
    "place_weights",
    "reduce_token_losses",
    "shift_to_next_token",
]

"""The DEL paper's baselines and ablation, on aligned tensors: ``logits[..., t, :]`` predicts ``labels[..., t]``.

Every function returns a *per-position* term (``[B, T]`` for ``[B, T]`` labels), float32, exactly 0 where it does
not apply, so the caller decides the normalisation (``reduce_token_losses`` or the trainer's step-wide digit
count). Two kinds:

* **Digit criteria** (``ntl_was``, ``ntl_mse``, ``dist2``, ``del``, ``del_centered``, ``del_dist``,
  ``ntl_number``) are *added* to cross-entropy, ``L = CE + alpha * mean over digit targets`` (over numbers for
  ``ntl_number``). They read the ``[..., 10]`` slice of
  :class:`~del_plugin.core.digits.DigitTargets` only: ``p_hat = softmax`` over the ten logits of the
  target's digit family, ``y`` the target digit.

  - ``ntl_was``:  ``sum_k p_hat_k |y - k|``                       (Number Token Loss, Wasserstein form)
  - ``ntl_mse``:  ``(sum_k p_hat_k k - y)^2``                     (Number Token Loss, MSE form)
  - ``dist2``:    ``w_t * KL(q || p_hat)``, ``q = softmax_k(-(y - k)^2 / tau)``, ``w_t`` the DIST2 place weight
                  (:func:`dist2_place_weights`)
  - ``del``:      ``u_t * mean_k(p_hat_k BCE_k)``                  (:func:`del_token_losses`)
  - ``del_centered``: ``u_t * mean_k(p_hat_k BCE(z_k - mean_j z_j, onehot(y)_k))``  (DEL, shift-invariant)
  - ``del_dist``: ``u_t * mean_k(p_hat_k BCE_k) * sum_k p_hat_k |y - k|``  (DEL times the NTL-WAS distance)
  - ``ntl_number``: per *number* ``|y_hat - y| / (|y_hat| + |y| + eps)``, ``y_hat = sum_d 10^(i_d) sum_k p_hat_k k``
    (the number-level NTL of ``ntloss.NumberLevelLoss``), at the number's first digit and averaged over numbers

* **Token criteria** (``mixce``, ``emo``) *replace* cross-entropy over all target tokens; they need the full
  logits. ``alpha`` interpolates: ``l_t = (1 - alpha) * NLL_t + alpha * criterion_t`` (``alpha = 1``: the
  criterion as published).

  - ``mixce``: ``eta * NLL_t + (1 - eta) * sg[exp(-NLL_t)] * NLL_t``
  - ``emo``:   ``0.5 * (NLL_t + sg[NLL_t / emo_t] * emo_t)``, ``emo_t = 1 - <e_y, E^T q>`` with ``E`` the frozen,
    row-L2-normalised initial output embedding and ``q = p - sg[p_y] onehot(y)`` (the model distribution less
    the detached target mass, *not* renormalised; the gradient still flows through ``p_y``).

``mle`` is cross-entropy alone: no term at all.

The package: :mod:`~del_plugin.core.criteria.digit` and :mod:`~del_plugin.core.criteria.number` (terms added to
cross-entropy), :mod:`~del_plugin.core.criteria.token` (losses that replace it),
:mod:`~del_plugin.core.criteria.registry` (the criteria by name) and :mod:`~del_plugin.core.criteria.dispatch` (their
terms, reductions and logged sums, by name).
"""

from . import digit, dispatch, number, registry, token
from .digit import *  # noqa: F403 (the package's names are its modules')
from .dispatch import *  # noqa: F403
from .number import *  # noqa: F403
from .registry import *  # noqa: F403
from .token import *  # noqa: F403

__all__ = [*digit.__all__, *number.__all__, *registry.__all__, *dispatch.__all__, *token.__all__]

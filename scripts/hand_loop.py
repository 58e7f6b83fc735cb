"""A hand-written PyTorch training loop beside parabench (its peer), and parabench's ratio to it.

Usage::

    python scripts/hand_loop.py --workload cnn --profile tiny --steps 5 --warmup 2 --repeats 3
    python scripts/hand_loop.py --workload vgg11 --profile full --device cuda --batch-size 64 \\
        --precision bf16 --channels-last on --steps 50 --warmup 20 --repeats 5
    python scripts/hand_loop.py --workload cnn --profile quick --compare 9   # + parabench's ratio

Trains the workload's own model, data, optimizer and loss with a plain loop (data on the
device, each batch an index-select of a seeded permutation; forward and loss under autocast
for bf16 / fp16, backward, step, zero_grad; ``torch.cuda.synchronize`` before every clock
read): ``--warmup`` steps untimed, then ``--repeats`` timed windows of ``--steps`` steps.
Prints one JSON object on stdout (median samples/s, the windows' rates, min / max and the
median's 95 % bootstrap CI, ``torch.cuda.max_memory_allocated`` over the timed windows, the
load average before and after) and a one-line summary on stderr.

``--compare N`` runs parabench's own serial case of the same configuration and the hand loop
in this process, N interleaved rounds of one window each (the first of the two alternating),
and prints parabench's ratio to the hand loop (median of the rounds' ratios) with the rounds,
both loops' samples/s, and how far their first losses (the same samples from the same seed)
are apart; ``--steps`` is then the window of both (default: about 2 s at parabench's speed),
and no warm-up or repeat count of the hand loop's own applies. The loop itself lives in
:mod:`parabench.case.peer`; this is its command line.
"""

from __future__ import annotations

import argparse
import json
import sys

from parabench.case.peer import DTYPES, Peer, compare, hand_loop
from parabench.config import DEVICES, PROFILES

ON_OFF = ("on", "off")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", required=True, help="a torch workload: cnn, mlp, vgg11, gpt...")
    p.add_argument("--profile", default="quick", choices=PROFILES)
    p.add_argument("--device", default="cpu", choices=DEVICES)
    p.add_argument("--batch-size", type=int, default=None,
                   help="default: the workload's for the profile")
    p.add_argument("--precision", default="fp32", choices=tuple(DTYPES))
    p.add_argument("--channels-last", default="off", choices=ON_OFF,
                   help="model and batches in torch.channels_last (convolutional workloads)")
    p.add_argument("--compile", default="off", choices=ON_OFF,
                   help="model.compile(dynamic=False), compiled in the warm-up")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None,
                   help="steps per timed window (default 20; --compare: ~2 s of parabench's)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--repeats", type=int, default=5, help="timed windows")
    p.add_argument("--compare", type=int, default=0, metavar="ROUNDS",
                   help="also run parabench's serial case: ROUNDS interleaved windows each")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        peer = Peer(workload=args.workload, profile=args.profile, device=args.device,
                    batch_size=args.batch_size, precision=args.precision,
                    channels_last=args.channels_last == "on", compile=args.compile == "on",
                    threads=args.threads, seed=args.seed)
    except (ValueError, KeyError) as e:
        print(f"hand_loop: {e}", file=sys.stderr)
        return 2
    if args.compare:
        result = compare(peer, rounds=args.compare, steps=args.steps)
    else:
        result = hand_loop(peer, steps=args.steps or 20, warmup=args.warmup,
                           repeats=args.repeats)
    print(json.dumps(result.to_dict()))
    print(result.summary(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Solution to exercise 1: the tail effect, measured.

Launches block_placement's kernel (every block spins for the same time) with
a grid of 2.5 waves: 2.5 x 2 x (number of SMs) blocks of 1,024 threads.
Two full waves run, then a half wave in which half the block slots of the
GPU sit idle. The grid should take three block-times, as long as a grid of
three full waves, though it does only 5/6 of the work.

Run:    python code/threads_warps/ex1_tail_effect.py
Checks: block_placement's checks (every block recorded, SM ids, blocks per
        SM, waves: 3 observed for 2.5 predicted-full); and the whole grid
        takes at least 2.75 block-times (it cannot finish in 2.5).
Facts:  busy, the share of the block slots' time spent running a block:
        every block's recorded end minus start (%globaltimer), summed, over
        the slots times the whole grid's time.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and block_placement
import block_placement as bp  # noqa: E402
import cudabook as cb  # noqa: E402


# --8<-- [start:solution]
def main(argv=None) -> int:
    cb.parse_args(argv, __doc__)
    cb.gpu_alone()                                            # it measures the hardware
    gpu = cb.init()
    kernel = bp.load_kernel()
    per_sm = bp.predicted_blocks_per_sm(gpu, bp.THREADS)     # 2 blocks of 1,024 threads
    slots = per_sm * gpu.sm_count                             # blocks the GPU holds at once
    blocks = (5 * slots) // 2                                 # 2.5 waves' worth
    bp.place(kernel, gpu.sm_count, bp.THREADS, 1000)          # warm-up
    facts = bp.run_and_check(kernel, gpu, blocks, per_sm)
    if facts:
        block_times = facts["total_us"] / facts["spin_us"]
        cb.report_check(cb.expect("2.5 waves take about 3 block-times", block_times >= 2.75,
                                  f"{block_times:.2f} block-times for {blocks / slots:.2f} waves of work"))
        # The share of the GPU's block-slot time spent running blocks, from
        # the recorded start and end of every block (%globaltimer), over the
        # slots times the whole grid's time: measured, not assumed.
        ran_us = sum(e - s for s, e in zip(facts["start_us"], facts["end_us"]))
        busy = ran_us / (slots * facts["total_us"])
        counted = blocks / (facts["waves_observed"] * slots)  # what counting blocks would say
        print(f"{blocks} blocks = {blocks / slots:.2f} waves of work, run in {facts['waves_observed']} waves:\n"
              f"  the block slots were busy {100 * busy:.1f}% of the grid's time "
              f"(counting blocks per wave would say {100 * counted:.1f}%)")
        cb.report_facts(**facts, block_times=block_times, waves_of_work=blocks / slots, busy=busy,
                        busy_by_count=counted)
    return cb.finish()
# --8<-- [end:solution]


if __name__ == "__main__":
    sys.exit(cb.run(main))

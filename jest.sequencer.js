const Sequencer = require('@jest/test-sequencer').default;

/**
 * Jest starts the files that took longest in its cached timings first. Without timings (a fresh
 * clone, CI) it starts the largest first, and a small file that waits on real time would start
 * among the last and hold the run open on one worker: the Redis contract files are a few lines that
 * run the whole store contract. Files jest has no timing for start in this order instead: the
 * contract files, the integration files (real servers, real windows), then the unit files (pure and
 * quick, they fill in at the end); each group largest first.
 */
const GROUPS = [/[\\/]test[\\/]contract[\\/]/, /[\\/]test[\\/]integration[\\/]/];
const group = (test) => {
  const i = GROUPS.findIndex((re) => re.test(test.path));
  return i < 0 ? GROUPS.length : i;
};

class CustomSequencer extends Sequencer {
  sort(tests) {
    // Failed ones, then the timed ones (slowest first), then the rest by size.
    const sorted = super.sort(tests);
    const timed = sorted.filter((t) => t.duration != null);
    const untimed = sorted.filter((t) => t.duration == null);
    // Array.prototype.sort is stable: within a group, the size order stays.
    return [...timed, ...untimed.sort((a, b) => group(a) - group(b))];
  }
}

module.exports = CustomSequencer;

"""What keeps a candidate honest: the static report on its source, the runtime
guards in the process that runs it, the sampled re-check of timed outputs, the
roofline floor, and the problem lint. Below the engine: it imports no engine
module; the engine hands it what it needs."""

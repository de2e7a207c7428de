package engine

// RestoreChainFixture and RestoreRounds are restoreChainFixture and
// restoreRounds, for the benchmarks of package engine_test, which restore
// through the checkpoint stores.
var (
	RestoreChainFixture = restoreChainFixture
	RestoreRounds       = restoreRounds
)

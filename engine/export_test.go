package engine

// RestoreChainFixture is restoreChainFixture, for the benchmarks of package
// engine_test, which restore through the checkpoint stores.
var RestoreChainFixture = restoreChainFixture

// CPUTime is cpuTime, for the same.
var CPUTime = cpuTime

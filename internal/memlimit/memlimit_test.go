package memlimit

import (
	"testing"
	"testing/fstest"
)

func TestAvailable(t *testing.T) {
	const meminfo = "MemTotal:       24683652 kB\nMemFree:         1000 kB\n"
	const total = 24683652 << 10
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"no cgroup: the machine", map[string]string{"proc/meminfo": meminfo}, total},
		{"nothing readable", map[string]string{}, 0},
		{"v2 limit in the group", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/kubepods/pod1/c1\n",
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "2147483648\n",
		}, 2 << 30},
		{"v2 as a container sees it: the root", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "1073741824\n",
		}, 1 << 30},
		{"v2 max: the machine", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n",
		}, total},
		{"v1 with no limit (this machine)", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "5:devices:/\n4:memory:/process_api/x\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":               "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "9223372036854771712\n",
		}, total},
		{"v1 limit, controllers listed together", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "4:cpu,memory:/docker/abc\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "536870912\n",
		}, 512 << 20},
		{"a limit above the machine's memory: the machine", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "107374182400\n",
		}, total},
		{"garbage: ignored", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "junk\n0::/\n", "sys/fs/cgroup/memory.max": "lots\n",
		}, total},
	} {
		fsys := fstest.MapFS{}
		for name, data := range c.files {
			fsys[name] = &fstest.MapFile{Data: []byte(data)}
		}
		if got := available(fsys); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

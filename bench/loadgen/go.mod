module groupgate/bench/loadgen

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
)

package sim

import (
	"bufio"
	"io"
	"strconv"
)

// WriteCSV writes the runs' time series: one row per run (policy) per step
// per tracked key with the exact fleet-wide admitted cost in the trailing
// window (true_admitted), the limit, the central node's figure, whether the
// step lies in a partitioned phase, and per region the highest estimate
// among its live nodes (view_<region>, -1 when none is up).
func WriteCSV(w io.Writer, runs ...*Result) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("policy,t_ms,rule,key,true_admitted,limit,central_admitted,partitioned")
	for _, r := range runs[0].Regions {
		bw.WriteString(",view_" + r)
	}
	bw.WriteByte('\n')
	var b []byte
	for _, res := range runs {
		for _, row := range res.Series {
			b = append(b[:0], res.Report.Policy...)
			b = append(b, ',')
			b = writeRow(b, row)
			bw.Write(b)
		}
	}
	return bw.Flush()
}

func writeRow(b []byte, row SeriesRow) []byte {
	b = strconv.AppendInt(b, row.TMS, 10)
	b = append(b, ',')
	b = append(b, row.Rule...)
	b = append(b, ',')
	b = append(b, row.Key...)
	b = append(b, ',')
	b = strconv.AppendUint(b, row.True, 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, row.Limit, 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, row.Central, 10)
	b = append(b, ',')
	b = strconv.AppendBool(b, row.Partitioned)
	for _, v := range row.Views {
		b = append(b, ',')
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
	}
	return append(b, '\n')
}

# bench/report.awk — turns the summary of a bench/run into the tables of the
# results files, as Markdown and JSON fragments.
#
#   awk -v out=PREFIX -f bench/report.awk summary.tsv figures.txt ratios.txt targets.txt
#
# summary.tsv   key TAB n TAB min TAB median TAB max TAB samples(comma)
# figures.txt   key|label|unit|scale|decimals       (shown value = value * scale)
# ratios.txt    label|numerator|denominator|target  (target ">= x" or empty)
# targets.txt   label|key|scale|target|unit         (target "<= x" or ">= x")
# A numerator or denominator "max:k1,k2,..." is the key among k1,k2,... with
# the largest median; "%N" and "%D" in a label name the keys chosen.
# Ratios are median / median.  Writes PREFIX.{fig,ratio,target}.{md,json}.

function jstr(s) {
	gsub(/\\/, "\\\\", s)
	gsub(/"/, "\\\"", s)
	gsub(/\t/, " ", s)
	return "\"" s "\""
}

function resolve(spec,    list, n, i, best) {
	if (spec !~ /^max:/)
		return spec
	n = split(substr(spec, 5), list, ",")
	best = ""
	for (i = 1; i <= n; i++)
		if ((list[i] in med) && (best == "" || med[list[i]] + 0 > med[best] + 0))
			best = list[i]
	return best
}

function meets(v, target,    p) {
	split(target, p, " ")
	if (v == "")
		return "no"
	if (p[1] == ">=")
		return (v + 0 >= p[2] + 0) ? "yes" : "no"
	return (v + 0 <= p[2] + 0) ? "yes" : "no"
}

function scaled(v, scale, dec) {
	return sprintf("%." dec "f", v * scale)
}

BEGIN { FS = "\t" }
FNR == 1 { part++ }

part == 1 {
	n[$1] = $2; mn[$1] = $3; med[$1] = $4; mx[$1] = $5; smp[$1] = $6
	next
}

part == 2 {
	split($0, f, "|")
	k = f[1]
	if (!(k in med))
		next
	printf "| %s | %s | %s | %s | %s |\n", f[2], f[3], scaled(med[k], f[4], f[5]),
		scaled(mn[k], f[4], f[5]), scaled(mx[k], f[4], f[5]) > (out ".fig.md")
	ns = split(smp[k], s, ",")
	list = ""
	for (i = 1; i <= ns; i++)
		list = list (i > 1 ? ", " : "") sprintf("%.6g", s[i] * f[4])
	printf "%s    %s: {\"label\": %s, \"unit\": %s, \"min\": %s, \"median\": %s, \"max\": %s, \"n\": %d, \"samples\": [%s]}",
		(nfig++ ? ",\n" : ""), jstr(k), jstr(f[2]), jstr(f[3]), scaled(mn[k], f[4], 6),
		scaled(med[k], f[4], 6), scaled(mx[k], f[4], 6), n[k], list > (out ".fig.json")
	next
}

part == 3 {
	split($0, r, "|")
	num = resolve(r[2]); den = resolve(r[3])
	if (num == "" || den == "" || !(num in med) || !(den in med) || med[den] + 0 <= 0)
		next
	label = r[1]
	gsub(/%N/, num, label)
	gsub(/%D/, den, label)
	v = sprintf("%.3f", med[num] / med[den])
	met = r[4] == "" ? "" : meets(v, r[4])
	printf "| %s | %s | %s | %s |\n", label, v, r[4], met > (out ".ratio.md")
	printf "%s    {\"name\": %s, \"numerator\": %s, \"denominator\": %s, \"value\": %s, \"target\": %s, \"met\": %s}",
		(nratio++ ? ",\n" : ""), jstr(label), jstr(num), jstr(den), v,
		(r[4] == "" ? "null" : jstr(r[4])), (met == "" ? "null" : (met == "yes" ? "true" : "false")) \
		> (out ".ratio.json")
	next
}

part == 4 {
	split($0, t, "|")
	k = t[2]
	if (!(k in med))
		next
	v = scaled(med[k], t[3], 3)
	met = meets(v, t[4])
	printf "| %s | %s %s | %s %s | %s |\n", t[1], scaled(med[k], t[3], 1), t[5], t[4], t[5], met \
		> (out ".target.md")
	printf "%s    {\"name\": %s, \"figure\": %s, \"median\": %s, \"unit\": %s, \"target\": %s, \"met\": %s}",
		(ntarget++ ? ",\n" : ""), jstr(t[1]), jstr(k), v, jstr(t[5]), jstr(t[4]),
		(met == "yes" ? "true" : "false") > (out ".target.json")
	next
}

END {
	# every fragment exists, even when empty
	printf "" >> (out ".fig.md"); printf "" >> (out ".fig.json")
	printf "" >> (out ".ratio.md"); printf "" >> (out ".ratio.json")
	printf "" >> (out ".target.md"); printf "" >> (out ".target.json")
}

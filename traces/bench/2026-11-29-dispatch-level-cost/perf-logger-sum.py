# Medians over a llama-server log's decode graphs (the first 5 skipped) of GGML_VK_PERF_LOGGER's per-op sums and total, us.
import re,statistics as st,sys
def load(f):
    blocks=[]; cur={}
    for l in open(f,errors='replace'):
        m=re.match(r'(.*): (\d+) x ([\d.]+) us = ([\d.]+) us',l)
        if m: cur[m.group(1).strip()]=float(m.group(4))
        m=re.match(r'Total time: ([\d.e+]+) us',l)
        if m:
            cur['TOTAL']=float(m.group(1)); blocks.append(cur); cur={}
    return blocks
for f in sys.argv[1:]:
    dec=[x for x in load(f) if x['TOTAL']<10000][5:]
    if not dec: print(f,'none'); continue
    keys=sorted(set(k for x in dec for k in x))
    print(f, len(dec), ' | '.join(f"{k[:28]}={st.median(x.get(k,0) for x in dec):.0f}" for k in keys if st.median(x.get(k,0) for x in dec)>0))

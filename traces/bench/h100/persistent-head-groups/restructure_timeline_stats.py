import sys, gzip, statistics
EV = ["layer start","qkv: row staged","qkv: done","attn: q polled","attn: partials put","merge: partials polled","merge: att put","o: att polled (inv 0)","o: att staged (barrier)","o: D put","mlp: D polled+staged","mlp: gate/up done","mlp: down done","mlp: arrival","next layer start"]
def load(p):
    steps, cur = [], []
    for line in gzip.open(p,'rt'):
        line=line.strip()
        if line=='--': steps.append(cur); cur=[]
        elif line: cur.append([int(v) for v in line.split()[1:]])
    return steps[2:]
steps=load(sys.argv[1])
print(len(steps),"steps",len(steps[0]),"wgs")
for k,name in enumerate(EV):
    lo,med,hi=[],[],[]
    for s in steps:
        base=min(w[0] for w in s if w[0]>0)
        vals=sorted(w[k]-base for w in s if w[k]>0)
        if vals: lo.append(vals[0]); med.append(vals[len(vals)//2]); hi.append(vals[-1])
    n=sum(1 for w in steps[0] if w[k]>0)
    if lo: print(f"{name:28s} {n:4d} {statistics.median(lo)/1e3:7.2f} {statistics.median(med)/1e3:7.2f} {statistics.median(hi)/1e3:7.2f}")

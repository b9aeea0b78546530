"""What the fast-math activation recipe's instructions give on a real GPU (NVFP4-ACT-5): a
maintainer's measurement, run on a lent NVIDIA machine (CuPy and PyTorch with CUDA in its
image), whose figures docs/spec.md section 8 quotes (docs/gpu/h200-act/rcp_approx.json):

    python tools/rcp_approx_measure.py OUT_DIR        (writes OUT_DIR/rcp.json)

- ``rcp.approx.ftz.f32`` on every fp32 significand of [1, 2), every power of two, the recipe's
  constants and the ends of the normal range, against the exact 1/v: the nearest fp32, the
  other neighbour (within one ulp), or beyond;
- ``cvt.rn.satfinite.e4m3x2.f32`` on 2^-12 .. 2^9 (step 2^-16 in the exponent) and on 448 ..
  500, 1e30, inf, NaN, against round-to-nearest-even saturating at 448 (NVFP4-E4M3-2);
- PyTorch's ``Tensor.to(torch.float8_e4m3fn)`` on the GPU at 448 .. 500, 1e30, inf, NaN.

Terse on purpose: the lent machine receives the main checkout, not a helper's worktree, so this
file travelled as a compressed copy inside the command (at most 2,000 characters). Imports
nothing of the kit.
"""
import json,sys,numpy as N,cupy as C,ml_dtypes as M,torch as T
K=r'''extern "C" __global__ void r(const float*x,float*y,long long n){long long i=(long long)blockIdx.x*blockDim.x+threadIdx.x;if(i<n){float v;asm("rcp.approx.ftz.f32 %0, %1;":"=f"(v):"f"(x[i]));y[i]=v;}}
extern "C" __global__ void c(const float*x,unsigned short*y,long long n){long long i=(long long)blockIdx.x*blockDim.x+threadIdx.x;if(i<n){unsigned short v;asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;":"=h"(v):"f"(x[i]),"f"(0.0f));y[i]=v;}}'''
m=C.RawModule(code=K);R=m.get_function("r");V=m.get_function("c")
f=N.float32
def rc(a):
 x=C.asarray(a.astype(f));y=C.empty_like(x);R(((x.size+255)//256,),(256,),(x,y,N.int64(x.size)));return C.asnumpy(y)
def cv(a):
 x=C.asarray(a.astype(f));y=C.empty(x.size,dtype=C.uint16);V(((x.size+255)//256,),(256,),(x,y,N.int64(x.size)));return (C.asnumpy(y)>>8).astype(N.uint8)
def cl(x,y):
 e=1.0/x.astype(N.float64);n=e.astype(f);lo=N.where(n.astype(N.float64)>e,N.nextafter(n,f(0)),n);hi=N.where(n.astype(N.float64)<e,N.nextafter(n,f(N.inf)),n)
 rep=n.astype(N.float64)==e;h=y==n;o=~h&((y==lo)|(y==hi));b=~h&~o
 ex=lambda k:[[float(a).hex(),float(c).hex()] for a,c in zip(x[k][:6],y[k][:6])]
 return dict(values=int(x.size),representable=int(rep.sum()),rep_exact=int((rep&h).sum()),nearest=int(h.sum()),other=int(o.sum()),beyond=int(b.sum()),other_ex=ex(o),beyond_ex=ex(b))
r={"dev":C.cuda.runtime.getDeviceProperties(0)["name"].decode()}
b=(N.arange(2**23,dtype=N.uint32)+N.uint32(0x3F800000)).view(f);r["rcp_1_2"]=cl(b,rc(b))
p=f(2.)**N.arange(-126,128,dtype=f);r["rcp_pow2"]=cl(p,rc(p))
k=N.array([6,3,5,7,12,2688,448,26.88,.1,1e-30,1e30],f);r["rcp_const"]={float(a).hex():float(c).hex() for a,c in zip(k,rc(k))}
E=N.concatenate([(N.arange(-8,8)+0x00800000).astype(N.uint32).view(f),(N.arange(-8,8)+0x7E800000).astype(N.uint32).view(f),N.array([0,1e-40,2.**-127],f)])
r["rcp_ends"]=[[float(a).hex(),float(c).hex()] for a,c in zip(E,rc(E))]
s=N.concatenate([N.exp2(N.arange(-12,9,2.**-16)).astype(f),N.array([448,456,460,463.99,464,464.01,470,480,500,1e30,N.inf,N.nan],f)])
g=cv(s);w=N.minimum(N.nan_to_num(s),f(448)).astype(M.float8_e4m3fn).view(N.uint8);d=g!=w;d[-1]=False
r["cvt"]=dict(values=int(s.size),differ=int(d.sum()),ex=[[float(a).hex(),int(c),int(e)] for a,c,e in zip(s[d][:6],g[d][:6],w[d][:6])],special={str(float(v)):int(c) for v,c in zip(s[-12:],g[-12:])})
t=T.tensor([448.,456.,464.,470.,480.,500.,1e30,float("inf"),float("nan")],device="cuda")
r["torch"]=[T.__version__,t.to(T.float8_e4m3fn).view(T.uint8).cpu().tolist()]
open(sys.argv[1]+"/rcp.json","w").write(json.dumps(r));print(json.dumps(r)[:3000])

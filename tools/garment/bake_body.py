# bake_body.py — the garment body posed and shaped by Blender itself (shape
# keys + Armature modifier), the independent reference of the body model.
#
#   blender -b --factory-startup --python tools/garment/bake_body.py -- BODY_DIR CASES.npz OUT.npy
#
# CASES.npz: shape [F,S], rotations [F,J,4] (local x,y,z,w). OUT.npy: [F,N,3]
# float32, the evaluated Body mesh of each case.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bl_util import Body, eval_mesh, script_args  # noqa: E402

a = script_args()
if len(a) != 3:
    sys.exit('usage: bake_body.py -- BODY_DIR CASES.npz OUT.npy')
body = Body(os.path.join(a[0], 'body.blend'), os.path.join(a[0], 'body.npz'))
z = np.load(a[1])
out = []
for beta, q in zip(z['shape'], z['rotations']):
    body.set_shape(beta)
    body.set_pose(q)
    out.append(eval_mesh(body.obj))
np.save(a[2], np.array(out, np.float32))
print('bake_body: %d cases -> %s' % (len(out), a[2]))

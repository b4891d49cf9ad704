// scene.js — the viewer's 3D view: renderer, lights, ground grid and camera.
//
// DESIGN
// One View draws the meshes of what is shown — one for a plain character,
// two for a body wearing a garment (drawn in place, overlapping) or for a
// retarget source beside its target (laid out in a row along x, each part
// shifted by a fixed offset from its rest box, a gap of GAP of the widest
// between them) — whose vertex positions the daemon computes (the page
// copies them in, viewer.js); this module only decides how they look. Part k
// is drawn in COLORS.parts[k]: the first in warm clay, the second in a cool
// blue, so the two are told apart on screen and in the e2e test's
// screenshots.
// Models are served Y-up (deform import --up converts, docs/own-character.md);
// the mesh hangs under a root group that turns another up axis (setUp, the
// page's ?up= override) to +Y, so the camera, the orbit controls and the
// ground grid always work in a Y-up world.
//
// Camera fitting (track): the camera looks at the mesh from a fixed
// elevation, from the front-right (glTF characters face +Z), more from the
// side when the mesh's bounding box is long front to back, nearly from the
// front for meshes side by side; the distance is
// the smallest at which every fitted point (the vertices, at most
// MAX_FIT_POINTS of them) falls inside FILL of the view's half-height and
// half-width, for the canvas's current aspect, and the target is shifted
// until the points' projection is centred. Policy:
//   'character' — a new character: default direction, fit, ground placed at
//                 the box's lowest point, grid cells sized to the character;
//   'view'      — the page's "Reset view": default direction, fit;
//   'pose'      — a new clip, a reset pose, a resized canvas: keep the
//                 user's orbit direction, fit the current box tightly;
//   'follow'    — any other frame: refit (keeping direction) only when the
//                 mesh left the fitted box, to the union of both, so a clip
//                 playing in place never makes the camera pump.
// Rendering is on demand: a frame is drawn when the mesh or the camera
// changed (the loop only runs the orbit controls' damping).
import * as THREE from 'three';
import { OrbitControls } from './vendor/OrbitControls.js';

// The first mesh is a warm clay colour, the second a clear blue, on a
// neutral background: the e2e test finds the first mesh in screenshots by its
// warmth (red well above blue) and the second by its blueness (blue well
// above red), so the background, grid and shadow must stay neutral (their
// blue exceeds their red by less than 25).
export const COLORS = {
  background: 0x23282f,
  parts: [0xd49a60, 0x3f7fe0], // clay, blue (viewer.css .swatch)
  grid: 0x3a414b, // every cell
  gridMajor: 0x56606d, // every GRID_MAJOR cells
};

const ELEVATION = (16 * Math.PI) / 180;
const FILL = 0.72; // the fitted points span this fraction of the half view (a margin around)
const FOV = 35;
const MAX_FIT_POINTS = 4096;
const GRID_MAJOR = 5;
const GRID_RADIUS = 40; // cells; the grid fades out towards it
const GAP = 0.15; // between parts laid out in a row, a fraction of the widest part

// The ground grid: one large quad whose fragment shader draws anti-aliased
// lines every cell and every GRID_MAJOR cells from its world x/z (a quad is
// clipped correctly where line segments crossing the camera plane are not,
// e.g. by software WebGL), fading out with the distance from its centre.
const GRID_VERTEX = `
varying vec3 vWorld;
void main() {
  vec4 w = modelMatrix * vec4(position, 1.0);
  vWorld = w.xyz;
  gl_Position = projectionMatrix * viewMatrix * w;
}`;
const GRID_FRAGMENT = `
uniform float uCell;
uniform float uRadius;
uniform vec2 uCenter;
uniform vec3 uColor;
uniform vec3 uMajor;
varying vec3 vWorld;
float lines(vec2 p, float cell) {
  vec2 c = p / cell;
  vec2 g = abs(fract(c - 0.5) - 0.5) / fwidth(c);
  return 1.0 - min(min(g.x, g.y), 1.0);
}
void main() {
  float minor = lines(vWorld.xz, uCell);
  float major = lines(vWorld.xz, uCell * ${GRID_MAJOR.toFixed(1)});
  float fade = 1.0 - smoothstep(0.25 * uRadius, uRadius, length(vWorld.xz - uCenter));
  float a = max(minor * 0.6, major) * fade;
  if (a < 0.004) discard;
  gl_FragColor = vec4(mix(uColor, uMajor, major), a);
}`;

function srgb(hex) {
  return new THREE.Vector3(((hex >> 16) & 255) / 255, ((hex >> 8) & 255) / 255, (hex & 255) / 255);
}

const UPS = {
  y: [0, 1, 0], '-y': [0, -1, 0], z: [0, 0, 1], '-z': [0, 0, -1], x: [1, 0, 0], '-x': [-1, 0, 0],
};

// 1, 2 or 5 times a power of ten, the nearest at or below v
function niceStep(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  const m = v / p;
  return (m >= 5 ? 5 : m >= 2 ? 2 : 1) * p;
}

function radialTexture() {
  const c = document.createElement('canvas');
  c.width = c.height = 128;
  const g = c.getContext('2d');
  const grad = g.createRadialGradient(64, 64, 0, 64, 64, 64);
  grad.addColorStop(0, 'rgba(0,0,0,0.55)');
  grad.addColorStop(0.55, 'rgba(0,0,0,0.22)');
  grad.addColorStop(1, 'rgba(0,0,0,0)');
  g.fillStyle = grad;
  g.fillRect(0, 0, 128, 128);
  return new THREE.CanvasTexture(c);
}

export class View {
  constructor(container) {
    this.el = container;
    const r = new THREE.WebGLRenderer({ antialias: true, preserveDrawingBuffer: true });
    r.setPixelRatio(Math.min(window.devicePixelRatio || 1, 2));
    container.prepend(r.domElement);
    this.renderer = r;
    this.scene = new THREE.Scene();
    this.scene.background = new THREE.Color(COLORS.background);
    this.camera = new THREE.PerspectiveCamera(FOV, 1, 0.01, 1000);
    this.scene.add(this.camera);
    // a key light that follows the camera keeps the visible side lit from
    // wherever the user orbits; the hemisphere light gives sky/ground fill
    const key = new THREE.DirectionalLight(0xffffff, 2.0);
    key.position.set(0.6, 0.9, 0.4);
    this.camera.add(key);
    this.camera.add(key.target);
    key.target.position.set(0, 0, -1);
    this.scene.add(new THREE.HemisphereLight(0xf0f3ff, 0x3b3835, 1.25));
    const rim = new THREE.DirectionalLight(0xbfd4ff, 0.9);
    rim.position.set(-1, 1.2, -1.5);
    this.scene.add(rim);

    this.root = new THREE.Group(); // turns the model's up axis to +Y
    this.scene.add(this.root);
    this.materials = COLORS.parts.map((color) => new THREE.MeshStandardMaterial({
      color, roughness: 0.62, metalness: 0.0, side: THREE.DoubleSide,
    }));
    this.pointMaterials = COLORS.parts.map((color) => new THREE.PointsMaterial({ color, size: 3, sizeAttenuation: false }));
    this.meshes = [];
    this.layout = 'overlay';

    // the grid's colours are given as the sRGB values shown (the shader
    // writes them as they are)
    this.grid = new THREE.Mesh(
      new THREE.PlaneGeometry(2, 2),
      new THREE.ShaderMaterial({
        vertexShader: GRID_VERTEX,
        fragmentShader: GRID_FRAGMENT,
        uniforms: {
          uCell: { value: 1 }, uRadius: { value: 1 }, uCenter: { value: new THREE.Vector2() },
          uColor: { value: srgb(COLORS.grid) }, uMajor: { value: srgb(COLORS.gridMajor) },
        },
        transparent: true,
        depthWrite: false,
        side: THREE.DoubleSide,
      }),
    );
    this.grid.rotation.x = -Math.PI / 2;
    this.grid.visible = false;
    this.scene.add(this.grid);
    this.hasGround = false;
    this.shadow = new THREE.Mesh(
      new THREE.PlaneGeometry(1, 1),
      new THREE.MeshBasicMaterial({ map: radialTexture(), transparent: true, depthWrite: false }),
    );
    this.shadow.rotation.x = -Math.PI / 2;
    this.shadow.renderOrder = -1;
    this.shadow.visible = false;
    this.scene.add(this.shadow);
    this.showGrid = true;

    this.controls = new OrbitControls(this.camera, r.domElement);
    this.controls.enableDamping = true;
    this.controls.dampingFactor = 0.12;
    this.controls.addEventListener('change', () => this.invalidate());
    this.fitBox = null; // the box the camera was last fitted to (world)
    this.ground = 0;
    this.dirty = true;
    this.resize();
    new ResizeObserver(() => { if (this.resize()) this.track('pose'); }).observe(container);
    const loop = () => {
      this.controls.update();
      if (this.dirty) { this.dirty = false; this.renderer.render(this.scene, this.camera); }
      requestAnimationFrame(loop);
    };
    requestAnimationFrame(loop);
  }

  invalidate() { this.dirty = true; }

  // draw now (tests and screenshots read the canvas right after a frame)
  render() { this.dirty = false; this.renderer.render(this.scene, this.camera); }

  // true when the canvas size changed
  resize() {
    const w = Math.max(1, this.el.clientWidth);
    const h = Math.max(1, this.el.clientHeight);
    const s = this.renderer.getSize(new THREE.Vector2());
    if (s.x === w && s.y === h) return false;
    this.renderer.setSize(w, h, false);
    this.camera.aspect = w / h;
    this.camera.updateProjectionMatrix();
    this.invalidate();
    return true;
  }

  // up: 'y' (the served convention), 'z', '-z', 'x', '-x', '-y'
  setUp(up) {
    const v = UPS[up] || UPS.y;
    this.root.quaternion.setFromUnitVectors(new THREE.Vector3(...v), new THREE.Vector3(0, 1, 0));
    this.root.updateMatrixWorld(true);
  }

  // the first mesh (one-mesh callers)
  get mesh() { return this.meshes[0] || null; }

  // A new character's rest mesh (Float32Array xyz, triangle indices, may be
  // empty: then points). Its camera is fitted on the first track('character').
  setMesh(positions, indices) { this.setMeshes([{ positions, indices }]); }

  // Several meshes at once: parts [{positions, indices}], drawn in
  // COLORS.parts order; layout 'overlay' (in place) or 'row' (side by side
  // along x, from the rest boxes).
  setMeshes(parts, layout = 'overlay') {
    for (const m of this.meshes) {
      this.root.remove(m);
      m.geometry.dispose();
    }
    this.meshes = parts.map(({ positions, indices }, k) => {
      const g = new THREE.BufferGeometry();
      g.setAttribute('position', new THREE.BufferAttribute(Float32Array.from(positions), 3).setUsage(THREE.DynamicDrawUsage));
      const n = positions.length / 3;
      const c = k % COLORS.parts.length;
      let m;
      if (indices.length) {
        g.setIndex(n > 65535 ? new THREE.Uint32BufferAttribute(indices, 1) : new THREE.Uint16BufferAttribute(indices, 1));
        g.computeVertexNormals();
        m = new THREE.Mesh(g, this.materials[c]);
      } else {
        m = new THREE.Points(g, this.pointMaterials[c]);
      }
      g.computeBoundingBox();
      this.root.add(m);
      return m;
    });
    this.layout = layout;
    if (layout === 'row' && this.meshes.length > 1) {
      const boxes = this.meshes.map((m) => m.geometry.boundingBox);
      const gap = GAP * Math.max(...boxes.map((b) => b.max.x - b.min.x));
      const total = boxes.reduce((w, b) => w + (b.max.x - b.min.x), 0) + gap * (boxes.length - 1);
      let x = -total / 2;
      this.meshes.forEach((m, k) => {
        m.position.x = x - boxes[k].min.x;
        x += boxes[k].max.x - boxes[k].min.x + gap;
      });
    }
    this.fitBox = null;
    this.invalidate();
  }

  // new positions of mesh k (default the first)
  setPositions(data, k = 0) {
    const m = this.meshes[k];
    const attr = m.geometry.getAttribute('position');
    attr.array.set(data);
    attr.needsUpdate = true;
    if (m.isMesh) m.geometry.computeVertexNormals();
    m.geometry.computeBoundingBox();
    this.invalidate();
  }

  worldBox() {
    const box = new THREE.Box3();
    for (const m of this.meshes) {
      m.updateMatrixWorld(true);
      box.union(m.geometry.boundingBox.clone().applyMatrix4(m.matrixWorld));
    }
    return box;
  }

  setGrid(on) {
    this.showGrid = on;
    this.grid.visible = on && this.hasGround;
    this.shadow.visible = on && this.hasGround;
    this.invalidate();
  }

  // see DESIGN: mode 'character' | 'pose' | 'follow'
  track(mode) {
    if (!this.meshes.length || this.meshes.some((m) => !m.geometry.boundingBox)) return;
    const box = this.worldBox();
    if (box.isEmpty()) return;
    if (mode === 'character' || !this.fitBox) this.placeGround(box);
    if (mode === 'character' || mode === 'view' || !this.fitBox) {
      this.fit(box, this.defaultDirection(box), this.fitPoints());
      return;
    }
    let extra = null;
    if (mode === 'follow') {
      const slack = this.fitBox.getSize(new THREE.Vector3()).multiplyScalar(0.02);
      const roomy = this.fitBox.clone().expandByVector(slack);
      if (roomy.containsBox(box)) return;
      extra = this.fitBox.clone();
      box.union(this.fitBox);
    }
    const dir = this.camera.position.clone().sub(this.controls.target);
    if (dir.lengthSq() < 1e-12) dir.copy(this.defaultDirection(box));
    this.fit(box, dir.normalize(), this.fitPoints(extra));
  }

  defaultDirection(box) {
    const s = box.getSize(new THREE.Vector3());
    // more from the side when the mesh is long front to back (a quadruped),
    // nearly from the front for parts side by side (neither hides the other)
    const az = ((this.layout === 'row' ? 10 : s.z > 1.3 * s.x ? 58 : 32) * Math.PI) / 180;
    return new THREE.Vector3(Math.sin(az) * Math.cos(ELEVATION), Math.sin(ELEVATION), Math.cos(az) * Math.cos(ELEVATION));
  }

  placeGround(box) {
    const s = box.getSize(new THREE.Vector3());
    const c = box.getCenter(new THREE.Vector3());
    const extent = Math.max(s.x, s.z, s.y * 0.5, 1e-6);
    const cell = niceStep(extent / 4);
    this.ground = box.min.y;
    const radius = cell * GRID_RADIUS;
    this.grid.scale.set(radius, radius, 1);
    this.grid.position.set(c.x, this.ground, c.z);
    const u = this.grid.material.uniforms;
    u.uCell.value = cell;
    u.uRadius.value = radius;
    u.uCenter.value.set(c.x, c.z);
    this.hasGround = true;
    this.grid.visible = this.showGrid;
    const r = Math.max(s.x, s.z) * 1.25;
    this.shadow.scale.set(r, r, 1);
    this.shadow.position.set(c.x, this.ground + extent * 1e-3, c.z);
    this.shadow.visible = this.showGrid;
    this.cell = cell;
  }

  // Up to MAX_FIT_POINTS of the meshes' vertices in world space (a stride
  // through each, shared out by size), plus the corners of extra (a box)
  // when given.
  fitPoints(extra) {
    const total = this.meshes.reduce((n, m) => n + m.geometry.getAttribute('position').count, 0);
    const stride = Math.max(1, Math.ceil(total / MAX_FIT_POINTS));
    const pts = [];
    for (const mesh of this.meshes) {
      const a = mesh.geometry.getAttribute('position').array;
      const n = a.length / 3;
      const m = mesh.matrixWorld;
      for (let i = 0; i < n; i += stride) pts.push(new THREE.Vector3(a[3 * i], a[3 * i + 1], a[3 * i + 2]).applyMatrix4(m));
    }
    if (extra) {
      for (let k = 0; k < 8; k++) {
        pts.push(new THREE.Vector3(k & 1 ? extra.max.x : extra.min.x, k & 2 ? extra.max.y : extra.min.y, k & 4 ? extra.max.z : extra.min.z));
      }
    }
    return pts;
  }

  // Fit the camera to the points (the box holds them), looking along -dir
  // (dir: target -> camera, unit).
  fit(box, dir, points) {
    const cam = this.camera;
    const tanV = Math.tan((cam.fov * Math.PI) / 360) * FILL;
    const tanH = tanV * cam.aspect;
    const worldUp = new THREE.Vector3(0, 1, 0);
    let right = new THREE.Vector3().crossVectors(worldUp, dir);
    if (right.lengthSq() < 1e-8) right.set(1, 0, 0); // looking straight down/up
    right.normalize();
    const up = new THREE.Vector3().crossVectors(dir, right).normalize();
    const target = box.getCenter(new THREE.Vector3());
    const v = new THREE.Vector3();
    // the smallest distance at which every point is inside the view
    const distance = () => {
      let d = 0;
      for (const p of points) {
        v.subVectors(p, target);
        const x = v.dot(right), y = v.dot(up), z = v.dot(dir);
        d = Math.max(d, z + Math.abs(x) / tanH, z + Math.abs(y) / tanV);
      }
      return d;
    };
    let dist = distance();
    for (let iter = 0; iter < 3; iter++) {
      // centre the points' projection: shift the target by the midpoint of
      // their extent in the view plane (at the target's depth)
      let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
      for (const p of points) {
        v.subVectors(p, target);
        const d = dist - v.dot(dir);
        const x = (v.dot(right) / d) * dist, y = (v.dot(up) / d) * dist;
        x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
      }
      target.addScaledVector(right, (x0 + x1) / 2).addScaledVector(up, (y0 + y1) / 2);
      dist = distance();
    }
    const size = box.getSize(new THREE.Vector3()).length();
    cam.position.copy(target).addScaledVector(dir, dist);
    cam.near = Math.max(dist / 200, size / 1e4);
    cam.far = dist * 60;
    cam.up.set(0, 1, 0);
    cam.updateProjectionMatrix();
    this.controls.target.copy(target);
    this.controls.minDistance = size * 0.05;
    this.controls.maxDistance = dist * 20;
    this.controls.update();
    this.fitBox = box.clone();
    this.invalidate();
  }
}

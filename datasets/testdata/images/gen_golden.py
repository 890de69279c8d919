#!/usr/bin/python3
"""Writes the small test images of this folder and golden.safetensors: what
torchvision 0.14 / PIL 9.4 make of them, read as ImageFolder reads a file
(PIL open, convert("RGB")), then transforms.Grayscale(1) for one channel,
then transforms.Resize((H, W)) (PIL's antialiased bilinear) when a size is
given. Each golden is uint8, shape [C, H, W], named "<file>/<C>/<H>x<W>"
(the image's own size for the decode goldens).

Run with Debian's python3 (python3-torchvision, python3-pil):
    /usr/bin/python3 datasets/testdata/images/gen_golden.py
"""
import gzip, json, os, struct

import numpy as np
from PIL import Image
from torchvision import transforms
from torchvision.datasets.folder import default_loader

HERE = os.path.dirname(os.path.abspath(__file__))


def fashion(n):
    with gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") as f:
        f.read(16)
        return np.frombuffer(f.read(n * 784), np.uint8).reshape(n, 28, 28)


def make_inputs():
    rng = np.random.default_rng(30)
    for i, px in enumerate(fashion(3)):
        Image.fromarray(px, "L").save(os.path.join(HERE, "fashion%d.png" % i))
    # A colour picture: smooth ramps, a sharp square, some noise (37 wide, 29 high).
    h, w = 29, 37
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([x * 255 / (w - 1), y * 255 / (h - 1), (x + y) * 255 / (w + h - 2)], -1)
    rgb[8:20, 10:22] = [250, 20, 60]
    rgb = np.clip(rgb + rng.normal(0, 12, rgb.shape), 0, 255).astype(np.uint8)
    Image.fromarray(rgb, "RGB").save(os.path.join(HERE, "color.png"))
    Image.fromarray(rgb, "RGB").save(os.path.join(HERE, "color.bmp"))
    Image.fromarray(rgb, "RGB").save(os.path.join(HERE, "color.tiff"))
    Image.fromarray(rgb, "RGB").save(os.path.join(HERE, "color.webp"), lossless=True)
    # Transparency is dropped, not composited: alpha from 0 to 255.
    a = (x * 255 // (w - 1)).astype(np.uint8)
    Image.fromarray(np.dstack([rgb, a]), "RGBA").save(os.path.join(HERE, "rgba.png"))
    Image.fromarray(rgb, "RGB").quantize(16).save(os.path.join(HERE, "palette.gif"))
    # PNG's other colour types: grey with alpha, a palette with transparency.
    Image.fromarray(np.dstack([rgb[:, :, 1], a]), "LA").save(os.path.join(HERE, "la.png"))
    Image.fromarray(rgb, "RGB").quantize(16).save(os.path.join(HERE, "pal.png"), transparency=bytes(range(0, 256, 16)))
    # JPEGs (PIL's defaults: quality 75, 4:2:0), a larger smooth photo-like one.
    h2, w2 = 40, 48
    y2, x2 = np.mgrid[0:h2, 0:w2]
    photo = np.stack([128 + 100 * np.sin(x2 / 7.0), 128 + 100 * np.cos(y2 / 5.0), 128 + 60 * np.sin((x2 + y2) / 9.0)], -1)
    photo = np.clip(photo + rng.normal(0, 4, photo.shape), 0, 255).astype(np.uint8)
    Image.fromarray(photo, "RGB").save(os.path.join(HERE, "photo.jpg"), quality=90)
    Image.fromarray(photo[:, :, 0], "L").save(os.path.join(HERE, "gray.jpg"), quality=90)
    # Odd sides (the last chroma column and row cover one pixel), and the
    # 4:2:2 and 4:4:4 subsamplings.
    Image.fromarray(photo[:39, :47], "RGB").save(os.path.join(HERE, "odd.jpg"), quality=90)
    Image.fromarray(photo, "RGB").save(os.path.join(HERE, "photo422.jpg"), quality=90, subsampling=1)
    Image.fromarray(photo, "RGB").save(os.path.join(HERE, "photo444.jpg"), quality=90, subsampling=0)


def torchvision_sample(path, channels, size):
    img = default_loader(path)  # ImageFolder's loader: PIL, convert("RGB")
    if channels == 1:
        img = transforms.Grayscale(1)(img)
    if size is not None:
        img = transforms.Resize(size)(img)  # bilinear, PIL's antialiased resize
    a = np.asarray(img, np.uint8)
    if a.ndim == 2:
        a = a[None]
    else:
        a = a.transpose(2, 0, 1)
    return np.ascontiguousarray(a)


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        b = tensors[name].tobytes()
        header[name] = {"dtype": "U8", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    header["__metadata__"] = {"generator": "gen_golden.py", "torchvision": __import__("torchvision").__version__,
                              "pil": Image.__version__}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    make_inputs()
    files = ["fashion0.png", "fashion1.png", "fashion2.png", "color.png", "color.bmp", "color.tiff",
             "color.webp", "rgba.png", "la.png", "pal.png", "palette.gif", "photo.jpg", "gray.jpg", "odd.jpg", "photo422.jpg", "photo444.jpg"]
    out = {}
    for f in files:
        path = os.path.join(HERE, f)
        for c in (1, 3):
            a = torchvision_sample(path, c, None)
            out["%s/%d/%dx%d" % (f, c, a.shape[1], a.shape[2])] = a
            if f.endswith(".png") or f == "photo.jpg":
                for size in ((20, 20), (13, 30), (64, 50)):
                    out["%s/%d/%dx%d" % (f, c, size[0], size[1])] = torchvision_sample(path, c, size)
    write_safetensors(os.path.join(HERE, "golden.safetensors"), out)
    print(len(out), "goldens")


if __name__ == "__main__":
    main()
